#!/usr/bin/env bash
# Mutation testing with cargo-mutants over the reconciler rules (server/src/controller/), the
# provisioner and its SQL builder (server/src/provision/) and the installer (server/src/install/),
# against the fast test tier: the server crate's unit tests and the in-memory integration tests. Left
# out of each mutant's test run: the 1,000-tenant fault drill (minutes per run; its rules are covered by
# the smaller drills), and the tests that need Debian's ClickHouse or check every generated statement
# with chdb (transport and parser, not rules; the ClickHouse stand-in's own chdb stays in). Results go to target/mutants/out/mutants.out/ (outcomes.json, caught.txt, missed.txt, …);
# MUTANTS.md records them.
#
#   bash scripts/mutants.sh                 # every mutant (728 at the time of writing: ~7 h on 2 cores)
#   bash scripts/mutants.sh 3/16            # one shard of sixteen (round-robin), as MUTANTS.md records
#   bash scripts/mutants.sh -f 'server/src/provision/sql.rs'   # one file (any cargo-mutants filter)
#   bash scripts/mutants.sh --list          # list the mutants only (`--list -f FILE`: of one file)
#   bash scripts/mutants.sh --iterate -f 'server/src/install/bundle.rs'   # only what the last runs did not catch
#
# It tests the committed HEAD, in a git worktree of its own (target/mutants/src) mutated in place, so
# that its build directory (target/mutants/target) stays valid between runs and sessions: each mutant
# rebuilds only the two workspace crates it touches, incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh >/dev/null
version=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $version"; then
  cargo install cargo-mutants --locked --version "$version"
fi
# nextest runs each test in a process of its own and stops at the first failure, so a caught mutant
# costs its build plus its first failing test, not the slowest test of the binary.
nextest=0.9.151
if ! cargo nextest --version 2>/dev/null | grep -q "^cargo-nextest $nextest"; then
  cargo install cargo-nextest --locked --version "$nextest"
fi

root=$PWD/target/mutants
if [ ! -e "$root/src/.git" ]; then
  rm -rf "$root/src"
  git worktree prune
  git worktree add --detach "$root/src" HEAD >/dev/null
else
  git -C "$root/src" checkout --quiet --force --detach "$(git rev-parse HEAD)"
  git -C "$root/src" clean --quiet -fdx
fi
export CARGO_TARGET_DIR=$root/target
# The ClickHouse stand-in's parser (chdb) lives in this checkout's venv, not in the worktree's.
export SENTRY_TENANTS_CHDB_PYTHON=$PWD/target/chdb-venv/bin/python

files=(-f 'server/src/controller/**/*.rs' -f 'server/src/provision/*.rs' -f 'server/src/install/*.rs')
# Both phases build and run only the server crate's unit tests and the integration test binary.
# cargo-mutants 27.1.0 runs its baseline with the mutated package's tests only (ignoring
# --test-package), where `--test integration` does not exist; so the baseline is skipped and the
# timeouts are set here (the selection takes ~30 s on the 2-core machine; a cold build ~8 min).
# The selection passes one process per test (`cargo nextest run` with the same arguments, run by hand).
scope=(--package sentry-tenants --test-package sentry-tenants,sentry-tenants-tests
  -C --lib -C --test=integration)
case "${1:-}" in
  --list)
    shift
    # The filters given after --list, or the whole scope.
    [ $# -gt 0 ] || set -- "${files[@]}"
    exec cargo mutants --dir "$root/src" --list "${scope[@]}" "$@"
    ;;
  [0-9]*/[0-9]*) selection=("${files[@]}" --shard "$1" --sharding round-robin) ;;
  '') selection=("${files[@]}") ;;
  *) selection=("$@") ;;
esac
cargo mutants --dir "$root/src" --in-place --output "$root/out" "${scope[@]}" "${selection[@]}" \
  --no-shuffle --baseline skip --timeout 300 --build-timeout 1500 --test-tool nextest -- \
  -E 'not (test(fault_drills::under_ten_percent) | test(clickhouse_live) | test(clickhouse_parser) | test(e2e_clickhouse))'
