#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, formatting, lints, every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
