#!/usr/bin/env bash
# Builds this checkout's release binary for this machine's architecture: a static executable (the
# `<arch>-unknown-linux-musl` target; Debian's musl-tools compile ring's C and assembly), so the binary
# alone is a whole image payload (`sentry-tenants image export`/`push`). Writes into dist/:
#   sentry-tenants-linux-<amd64|arm64>          the binary
#   sentry-tenants-linux-<arch>.tar.gz          it as kubectl-sentry_tenants with the licence (krew's archive)
#   <each of them>.sha256
# and prints the binary's path. What .github/workflows/release.yml runs on each architecture's runner;
# scripts/bench.sh measures what static linking costs with it. Installs the target and musl-tools first.
set -euo pipefail
cd "$(dirname "$0")/.."

case "$(uname -m)" in
  x86_64) arch=amd64 target=x86_64-unknown-linux-musl ;;
  aarch64) arch=arm64 target=aarch64-unknown-linux-musl ;;
  *) echo "release: no static build for $(uname -m)" >&2; exit 1 ;;
esac
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
rustup toolchain list | grep -q "^$toolchain" || rustup toolchain install "$toolchain" --profile minimal >&2
for t in "$target" wasm32-unknown-unknown; do # wasm: the dashboard the binary embeds
  rustup target list --installed --toolchain "$toolchain" | grep -qx "$t" || rustup target add "$t" --toolchain "$toolchain" >&2
done
if ! command -v musl-gcc >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi

cargo build --release --locked --target "$target" -p sentry-tenants --bin sentry-tenants >&2
binary=target/$target/release/sentry-tenants
# Static means no program interpreter: nothing for the kernel to load before the binary itself.
if readelf -l "$binary" | grep -q 'Requesting program interpreter'; then
  echo "release: $binary is dynamically linked" >&2
  exit 1
fi
mkdir -p dist
name=sentry-tenants-linux-$arch
cp "$binary" "dist/$name"
# krew installs a plugin from an archive; kubectl finds `kubectl sentry-tenants` as kubectl-sentry_tenants.
plugin=$(mktemp -d)
cp "$binary" "$plugin/kubectl-sentry_tenants"
cp LICENSE "$plugin/"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$plugin" -cf - kubectl-sentry_tenants LICENSE |
  gzip -n >"dist/$name.tar.gz"
rm -rf "$plugin"
(cd dist && sha256sum "$name" >"$name.sha256" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "release: dist/$name ($(du -h "dist/$name" | cut -f1), static), $(cut -d' ' -f1 "dist/$name.sha256")" >&2
echo "dist/$name"
