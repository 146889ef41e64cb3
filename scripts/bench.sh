#!/usr/bin/env bash
# Regenerates BENCHMARKS.md and BENCHMARKS.json at the repository root: installs what the benchmarks
# need (the toolchain via setup.sh, Debian's wrk as the load generator), builds the release binary
# (whose size is one of the figures) and the static one, and runs the bench runner in release. Extra arguments go to the
# runner, e.g. `--scales 1000` for a quicker run. The real control plane section starts its own cluster
# (scripts/cluster.sh, state in target/cluster-bench) and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
if ! command -v wrk >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi
echo "bench: $(wrk --version 2>&1 | head -1)"

cargo build --release --locked -p sentry-tenants
# The static build (scripts/release.sh) and this bench compiled for its musl target: the "Static build"
# section compares both with the glibc builds above.
SENTRY_TENANTS_STATIC_BINARY=$PWD/$(bash scripts/release.sh)
static_target=$(uname -m)-unknown-linux-musl
cargo build --release --locked --target "$static_target" -p sentry-tenants-tests --bin bench
export SENTRY_TENANTS_STATIC_BINARY SENTRY_TENANTS_STATIC_BENCH=$PWD/target/$static_target/release/bench
# The real control plane section: a cluster of its own, whose pods run the release binary.
export SENTRY_TENANTS_CLUSTER_DIR=target/cluster-bench
export SENTRY_TENANTS_POD_BINARY=$PWD/target/release/sentry-tenants
bash scripts/cluster.sh reset >/dev/null
SENTRY_TENANTS_E2E_KUBECONFIG=$(bash scripts/cluster.sh up)
export SENTRY_TENANTS_E2E_KUBECONFIG
trap 'bash scripts/cluster.sh down >/dev/null 2>&1' EXIT
cargo run --release --locked -p sentry-tenants-tests --bin bench -- "$@"
