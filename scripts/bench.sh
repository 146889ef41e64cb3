#!/usr/bin/env bash
# Regenerates BENCHMARKS.md and BENCHMARKS.json at the repository root: installs what the benchmarks
# need (the toolchain via setup.sh, Debian's wrk as the load generator), builds the release binary
# (whose size is one of the figures), and runs the bench runner in release. Extra arguments go to the
# runner, e.g. `--scales 1000` for a quicker run.
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
cargo run --release --locked -p sentry-tenants-tests --bin bench -- "$@"
