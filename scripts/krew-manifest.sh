#!/usr/bin/env bash
# Prints the krew plugin manifest of release VERSION (`v1.2.3`), from the archives' checksums that
# scripts/release.sh wrote into DIST (default dist/) for each architecture:
#   scripts/krew-manifest.sh v0.1.0 > dist/sentry-tenants.yaml
# With it in a krew index (or `kubectl krew install --manifest=…`), `kubectl sentry-tenants install`
# runs the binary as a kubectl plugin.
set -euo pipefail
version=${1:?usage: krew-manifest.sh VERSION [DIST]}
dist=${2:-dist}
repository=https://github.com/sentry-tenants/sentry-tenants
cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: sentry-tenants
spec:
  version: $version
  homepage: $repository
  shortDescription: Install and run a multi-tenant ClickHouse operator
  description: |
    Installs the sentry-tenants operator without Helm, provisions each Tenant's
    ClickHouse database, user and grants through Kubernetes Jobs, and opens its
    dashboard: kubectl sentry-tenants install, then kubectl sentry-tenants dashboard.
  platforms:
YAML
for arch in amd64 arm64; do
  archive=sentry-tenants-linux-$arch.tar.gz
  sha=$(cut -d' ' -f1 "$dist/$archive.sha256")
  cat <<YAML
    - selector:
        matchLabels:
          os: linux
          arch: $arch
      uri: $repository/releases/download/$version/$archive
      sha256: $sha
      bin: kubectl-sentry_tenants
YAML
done
