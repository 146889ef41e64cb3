#!/usr/bin/env bash
# Lints the release pipeline, which only runs on a tag and so never runs here: actionlint over the
# GitHub workflows, and krew's validate-krew-manifest over the manifest scripts/krew-manifest.sh
# writes (its shape; checksums of stand-in archives, since no release exists). Both are built from
# tests/tools/go.mod into target/tools (cached).
set -euo pipefail
cd "$(dirname "$0")/.."

tools=$PWD/target/tools
if [ ! -x "$tools/actionlint" ] || [ ! -x "$tools/validate-krew-manifest" ] || [ tests/tools/go.sum -nt "$tools/actionlint" ]; then
  (cd tests/tools && GOBIN=$tools GOFLAGS=-mod=mod go install github.com/rhysd/actionlint/cmd/actionlint sigs.k8s.io/krew/cmd/validate-krew-manifest)
fi
"$tools/actionlint" -no-color .github/workflows/*.yml

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for arch in amd64 arm64; do
  echo "stand-in $arch" >"$work/sentry-tenants-linux-$arch.tar.gz"
  (cd "$work" && sha256sum "sentry-tenants-linux-$arch.tar.gz" >"sentry-tenants-linux-$arch.tar.gz.sha256")
done
version=v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The validator wants the file named after the plugin.
bash scripts/krew-manifest.sh "$version" "$work" >"$work/sentry-tenants.yaml"
"$tools/validate-krew-manifest" -skip-install -manifest "$work/sentry-tenants.yaml"
echo "lint-release: workflows and krew manifest ($version) pass"
