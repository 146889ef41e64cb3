#!/usr/bin/env bash
# Mutation testing with cargo-mutants over the reconciler rules (server/src/controller/), the
# provisioner and its SQL builder (server/src/provision/) and the installer (server/src/install/),
# against the fast test tier: the server crate's unit tests and the in-memory integration tests. Left
# out of each mutant's test run: the 1,000-tenant fault drill (minutes per run; its rules are covered by
# the smaller drills), and the tests that need Debian's ClickHouse or chdb (transport and parser, not
# rules). Results go to mutants.out/ (outcomes.json, caught.txt, missed.txt, …); MUTANTS.md records them.
#
#   bash scripts/mutants.sh            # every mutant (714 at the time of writing: hours on 2 cores)
#   bash scripts/mutants.sh 3/16       # one shard of sixteen (round-robin), as MUTANTS.md records
#   bash scripts/mutants.sh --list     # list the mutants only
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh >/dev/null
version=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $version"; then
  cargo install cargo-mutants --locked --version "$version"
fi

# One build directory for every mutant and shard, kept between runs: only the workspace's own crates
# rebuild per mutant.
export CARGO_TARGET_DIR=$PWD/target/mutants
files=(-f 'server/src/controller/*.rs' -f 'server/src/provision/*.rs' -f 'server/src/install/*.rs')
scope=(--package sentry-tenants --test-package sentry-tenants --test-package sentry-tenants-tests
  "${files[@]}")
if [ "${1:-}" = --list ]; then
  exec cargo mutants --list "${scope[@]}"
fi
shard=()
# Round-robin, so that each shard samples every file (cargo-mutants requires --shard with it).
[ -n "${1:-}" ] && shard=(--shard "$1" --sharding round-robin)
cargo mutants "${scope[@]}" "${shard[@]}" --no-shuffle --timeout-multiplier 3 \
  -- --lib --test integration -- \
  --skip fault_drills::under_ten_percent --skip clickhouse_live --skip clickhouse_parser \
  --skip e2e_clickhouse
