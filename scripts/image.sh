#!/usr/bin/env bash
# Builds the operator image from this checkout without Docker and pushes it to the local cluster's
# registry (scripts/cluster.sh up starts it); the last line printed is the image by digest:
#   <registry>/sentry-tenants@sha256:…
# which the cluster's state directory also keeps (<state>/image): the reference its tests and
# scripts/try.sh install. Run it again after rebuilding the binary.
#
# The image is the one the Dockerfile describes (a test keeps the two equal): the binary at
# /usr/local/bin/sentry-tenants, user 65532:65532, entrypoint the binary with `run`, ports 8080 and 8081,
# the OCI source and licence labels; plus what the binary needs and no shell: the C libraries it links
# (the dev binary is not static; ldd names them), the CA bundle for https:// ClickHouse, and passwd and
# group entries for 65532. The binary is the one the tests already built ($SENTRY_TENANTS_POD_BINARY,
# default target/debug/sentry-tenants; scripts/bench.sh names the release one), without its debug
# sections. Same binary, same commit → same digest: scripts/oci_image.py writes reproducible layers.
#
# For the tests' drills, SENTRY_TENANTS_IMAGE_NAME (default sentry-tenants) names the repository and
# SENTRY_TENANTS_IMAGE_ENTRYPOINT (JSON) replaces the entrypoint: an image that exits at once, say.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(realpath -m "${SENTRY_TENANTS_CLUSTER_DIR:-target/cluster}")
binary=${SENTRY_TENANTS_POD_BINARY:-${CARGO_TARGET_DIR:-target}/debug/sentry-tenants}
registry=${SENTRY_TENANTS_REGISTRY:-$(cat "$dir/registry" 2>/dev/null || true)}
[ -n "$registry" ] || { echo "image: no registry (start one with scripts/cluster.sh up, or set SENTRY_TENANTS_REGISTRY)" >&2; exit 1; }
[ -x "$binary" ] || { echo "image: $binary is missing (cargo build -p sentry-tenants)" >&2; exit 1; }

name=${SENTRY_TENANTS_IMAGE_NAME:-sentry-tenants}
work=target/image/$name
rm -rf "$work" && mkdir -p "$work/etc"
objcopy --strip-debug "$binary" "$work/sentry-tenants"
echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" >"$work/etc/passwd"
echo "nonroot:x:65532:" >"$work/etc/group"

files=(
  --file "$work/sentry-tenants=/usr/local/bin/sentry-tenants:0755"
  --file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt:0644"
  --file "$work/etc/passwd=/etc/passwd:0644"
  --file "$work/etc/group=/etc/group:0644"
  --dir /tmp:1777
)
# The shared libraries the binary loads, at the paths the dynamic loader looks for them.
for lib in $(ldd "$work/sentry-tenants" | grep -o '/[^ ]*' | sort -u); do
  files+=(--file "$(realpath "$lib")=$lib:0755")
done

revision=$(git rev-parse HEAD)
version=$("$binary" version --client | sed -n "s/^client: //p") # what the binary says it is
tag="dev-$(git rev-parse --short=12 HEAD)"
entrypoint=${SENTRY_TENANTS_IMAGE_ENTRYPOINT:-'["/usr/local/bin/sentry-tenants"]'}
digest=$(python3 scripts/oci_image.py "$work/oci" --tag "$tag" "${files[@]}" \
  --user 65532:65532 --entrypoint "$entrypoint" --cmd '["run"]' \
  --expose 8080/tcp --expose 8081/tcp \
  --label org.opencontainers.image.source=https://github.com/sentry-tenants/sentry-tenants \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.version=$version" \
  --created "$(git log -1 --format=%cI HEAD | sed 's/+00:00$/Z/')")
skopeo copy -q --dest-tls-verify=false --digestfile "$work/pushed" \
  "oci:$work/oci:$tag" "docker://$registry/$name:$tag"
pushed=$(cat "$work/pushed")
[ "$pushed" = "$digest" ] || { echo "image: the registry holds $pushed, not the built $digest" >&2; exit 1; }
echo "image: pushed $registry/$name:$tag ($(du -h "$work/oci/blobs" | tail -1 | cut -f1) in blobs)" >&2
# The operator image of a local cluster: what its tests and scripts/try.sh install.
if [ "$name" = sentry-tenants ] && [ -d "$dir" ] && [ "$registry" = "$(cat "$dir/registry" 2>/dev/null)" ]; then
  echo "$registry/$name@$digest" >"$dir/image"
fi
echo "$registry/$name@$digest"
