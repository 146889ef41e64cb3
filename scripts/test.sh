#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, formatting, lints (host and the dashboard's wasm side),
# every test in the workspace, and one closing line with the totals.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The browser-only (`hydrate`) code of the dashboard, linted for the target it runs on.
cargo clippy --locked -p sentry-tenants-app --lib --target wasm32-unknown-unknown --features hydrate \
  --target-dir target/wasm -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# cargo prints one "test result" line per test binary, the last usually for doc tests with nothing in
# them; this line sums them all.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i; if ($(i+1) ~ /^ignored;?$/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
