#!/usr/bin/env bash
# Try sentry-tenants on this machine with no cluster around: starts the local cluster (scripts/cluster.sh:
# a real control plane and a real node; the operator image of this checkout built without Docker and
# pushed to the cluster's registry; the ClickHouse HTTP *stand-in* behind clickhouse.clickhouse.svc),
# installs the operator from that image as a user would, and opens its dashboard through a port-forward
# to the operator's pod: http://127.0.0.1:8080. Ctrl-C stops the port-forward; `bash scripts/cluster.sh
# down` stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/cluster.sh up >/dev/null
eval "$(bash scripts/cluster.sh env)"
ns=sentry-tenants

kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" create secret generic clickhouse-admin --from-literal=username="$SENTRY_TENANTS_CLICKHOUSE_ADMIN_USER" \
  --from-literal=password="$SENTRY_TENANTS_CLICKHOUSE_ADMIN_PASSWORD" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
target/debug/sentry-tenants install -n "$ns" --image "$SENTRY_TENANTS_IMAGE" --clickhouse-url "$SENTRY_TENANTS_CLICKHOUSE_URL"

cat <<MSG

  Local cluster: $KUBECONFIG (kubectl: $(command -v kubectl)); its node runs the operator's image
  $SENTRY_TENANTS_IMAGE
  ClickHouse: $SENTRY_TENANTS_CLICKHOUSE_URL — the tests' HTTP STAND-IN, not a ClickHouse server (see README)

  Dashboard: http://127.0.0.1:8080 (a port-forward to the operator's pod; Ctrl-C to stop it, then:
  bash scripts/cluster.sh down)

MSG
exec target/debug/sentry-tenants dashboard -n "$ns" --port 8080 --no-browser
