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
rustup component add clippy rustfmt --toolchain "$toolchain" >/dev/null
if ! rustup target list --installed --toolchain "$toolchain" | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown --toolchain "$toolchain"
fi
echo "setup: toolchain $toolchain with wasm32-unknown-unknown, clippy, rustfmt ready"
