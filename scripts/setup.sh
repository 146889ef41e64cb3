#!/usr/bin/env bash
# Installs what building and testing sentry-tenants needs on a fresh machine of this kind (Debian,
# rustup, root). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)

# rust-toolchain.toml names the toolchain and the wasm target, but RUSTUP_AUTO_INSTALL=0 stops rustup
# from installing them on demand, so add them explicitly.
if ! rustup toolchain list | grep -q "^${toolchain}"; then
  rustup toolchain install "$toolchain" --profile minimal
fi
rustup component add clippy rustfmt --toolchain "$toolchain" 2>&1 | grep -v "is up to date" || true
if ! rustup target list --installed --toolchain "$toolchain" | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown --toolchain "$toolchain"
fi
echo "setup: toolchain $toolchain with wasm32-unknown-unknown, clippy, rustfmt ready"

# Debian packages the tests use: the real ClickHouse server (18.16) for the HTTP transport tests,
# Chromium with chromedriver for the dashboard's browser tests, openssl and curl for the local
# cluster's certificates and health checks, and the parts of its node that Debian packages
# (scripts/cluster.sh): runc, the CNI plugins, iptables and conntrack for kube-proxy, the registry the
# node pulls from, and skopeo, which pushes the images scripts/image.sh builds.
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)
# npm installs axe-core (below); machines of this kind come with Node.js and npm.
command -v npm >/dev/null || missing+=(npm)
[ -x /usr/sbin/clickhouse-server ] || missing+=(clickhouse-server)
# Headless Chromium and its WebDriver for the dashboard's browser tests.
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
[ -x /usr/sbin/iptables ] || missing+=(iptables)
[ -x /usr/sbin/conntrack ] || missing+=(conntrack)
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
[ -x /usr/bin/skopeo ] || missing+=(skopeo)
# `podman load` reads `image export`'s archive in a test (no container is run with it).
[ -x /usr/bin/podman ] || missing+=(podman)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v objcopy >/dev/null || missing+=(binutils)
# actionlint runs it over the workflows' shell steps (scripts/lint-release.sh).
command -v shellcheck >/dev/null || missing+=(shellcheck)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The package's post-install tries to start a service; there is none to start here, and the tests
  # start their own server with a throwaway config.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'; }
echo "setup: clickhouse-server $(version clickhouse-server), chromium $(version chromium), runc $(version runc), docker-registry $(version docker-registry) ready"

# Go builds the local cluster (the control plane and the node's kubelet, kube-proxy, containerd, CoreDNS)
# from the modules pinned in tests/cluster/go.mod and tests/node/go.mod; machines of this kind come with
# Go (Debian's is too old).
go_wanted=$(sed -n 's/^go \([0-9.]*\)$/\1/p' tests/cluster/go.mod)
if ! command -v go >/dev/null; then
  echo "setup: Go >= $go_wanted is needed to build the local control plane (scripts/cluster.sh) and is not installed" >&2
  exit 1
fi
echo "setup: $(go version | cut -d' ' -f3) ready for the control plane (tests/cluster/go.mod wants go $go_wanted)"

# A current ClickHouse SQL parser (chdb-core from PyPI), in a venv under target/ so it is cached with
# the build and never committed.
chdb_version=26.9.0
venv=target/chdb-venv
if ! "$venv/bin/python" -c "import chdb, sys; sys.exit(0 if chdb.__version__.startswith('${chdb_version%%.*}') else 1)" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "chdb-core==${chdb_version}"
fi
echo "setup: chdb-core $chdb_version ready in $venv"

# axe-core (npm, pinned in tests/axe/package-lock.json) for the dashboard's accessibility checks in the
# browser tests; its node_modules stay out of git.
if [ ! -f tests/axe/node_modules/axe-core/axe.min.js ] \
  || ! grep -q "\"version\": \"$(sed -n 's/.*"axe-core": "\(.*\)".*/\1/p' tests/axe/package.json)\"" tests/axe/node_modules/axe-core/package.json; then
  npm ci --prefix tests/axe --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
fi
echo "setup: axe-core $(sed -n 's/.*"version": "\(.*\)".*/\1/p' tests/axe/node_modules/axe-core/package.json | head -1) ready in tests/axe"
