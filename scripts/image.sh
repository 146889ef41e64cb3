#!/usr/bin/env bash
# Builds the operator image from this checkout without Docker and pushes it to the local cluster's
# registry (scripts/cluster.sh up starts it); the last line printed is the image by digest:
#   <registry>/sentry-tenants@sha256:…
# which the cluster's state directory also keeps (<state>/image): the reference its tests and
# scripts/try.sh install. Run it again after rebuilding the binary.
#
# The image is the product's own: `sentry-tenants image export` of the binary the tests already built
# ($SENTRY_TENANTS_POD_BINARY, default target/debug/sentry-tenants; scripts/bench.sh names the release
# one), run from a copy without its debug sections so the image carries no 150 MB of line tables. So
# every cluster run proves the export: skopeo reads the archive, the registry stores it, containerd
# pulls it and the kubelet runs it (a test keeps its declarations equal to the Dockerfile's).
#
# For the tests' drills, SENTRY_TENANTS_IMAGE_NAME (default sentry-tenants) names the repository and
# SENTRY_TENANTS_IMAGE_ENTRYPOINT (JSON) replaces the entrypoint (scripts/oci_image.py --base): an
# image that exits at once, say.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(realpath -m "${SENTRY_TENANTS_CLUSTER_DIR:-target/cluster}")
binary=${SENTRY_TENANTS_POD_BINARY:-${CARGO_TARGET_DIR:-target}/debug/sentry-tenants}
registry=${SENTRY_TENANTS_REGISTRY:-$(cat "$dir/registry" 2>/dev/null || true)}
[ -n "$registry" ] || { echo "image: no registry (start one with scripts/cluster.sh up, or set SENTRY_TENANTS_REGISTRY)" >&2; exit 1; }
[ -x "$binary" ] || { echo "image: $binary is missing (cargo build -p sentry-tenants)" >&2; exit 1; }

name=${SENTRY_TENANTS_IMAGE_NAME:-sentry-tenants}
work=target/image/$name
rm -rf "$work" && mkdir -p "$work"
objcopy --strip-debug "$binary" "$work/sentry-tenants"
tag="dev-$(git rev-parse --short=12 HEAD)"
digest=$("$work/sentry-tenants" image export -o "$work/image.tar" --tag "$registry/$name:$tag" 2>"$work/export.log") ||
  { cat "$work/export.log" >&2; exit 1; }
source="oci-archive:$work/image.tar"
if [ -n "${SENTRY_TENANTS_IMAGE_ENTRYPOINT:-}" ]; then
  digest=$(python3 scripts/oci_image.py "$work/oci" --tag "$tag" --base "$work/image.tar" \
    --entrypoint "$SENTRY_TENANTS_IMAGE_ENTRYPOINT")
  source="oci:$work/oci:$tag"
fi
skopeo copy -q --dest-tls-verify=false --digestfile "$work/pushed" "$source" "docker://$registry/$name:$tag"
pushed=$(cat "$work/pushed")
[ "$pushed" = "$digest" ] || { echo "image: the registry holds $pushed, not the built $digest" >&2; exit 1; }
echo "image: pushed $registry/$name:$tag ($(du -h "$work/image.tar" | cut -f1) archive)" >&2
# The operator image of a local cluster: what its tests and scripts/try.sh install.
if [ "$name" = sentry-tenants ] && [ -d "$dir" ] && [ "$registry" = "$(cat "$dir/registry" 2>/dev/null)" ]; then
  echo "$registry/$name@$digest" >"$dir/image"
fi
echo "$registry/$name@$digest"
