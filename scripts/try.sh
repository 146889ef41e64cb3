#!/usr/bin/env bash
# Try sentry-tenants on this machine with no cluster around: starts the local control plane
# (scripts/cluster.sh: a real kube-apiserver, etcd and kube-controller-manager, and the tests' stand-in
# kubelet), a ClickHouse HTTP *stand-in* on the pod network, installs the operator into the cluster,
# then runs one more operator replica here in the foreground, whose dashboard is http://127.0.0.1:8080.
# Ctrl-C stops the replica; `bash scripts/cluster.sh down` stops the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
kubeconfig=$(bash scripts/cluster.sh up)
export KUBECONFIG=$kubeconfig
dir=$(dirname "$kubeconfig")
gateway="10.244.$(cat "$dir/subnet").1"
kubectl=(target/k8s/v1.36.3/bin/kubectl)
ns=sentry-tenants

# ClickHouse: the stand-in from the tests (no ClickHouse >= 20.4 installs here). It parses every
# statement with chdb and remembers users and locks; it stores no data.
password=$(openssl rand -hex 16)
if ! kill -0 "$(cat "$dir/pids/clickhouse-stand-in" 2>/dev/null)" 2>/dev/null; then
  cargo build --locked -q -p sentry-tenants-tests --bin clickhouse-stand-in
  CLICKHOUSE_STAND_IN_ADMIN_PASSWORD=$password target/debug/clickhouse-stand-in --listen "$gateway" \
    --admin-user admin >"$dir/clickhouse-stand-in.url" 2>"$dir/logs/clickhouse-stand-in.log" &
  echo $! >"$dir/pids/clickhouse-stand-in"
  echo "$password" >"$dir/clickhouse-stand-in.password"
  until [ -s "$dir/clickhouse-stand-in.url" ]; do sleep 0.5; done
fi
clickhouse_url=$(cat "$dir/clickhouse-stand-in.url")
password=$(cat "$dir/clickhouse-stand-in.password")

"${kubectl[@]}" get namespace "$ns" >/dev/null 2>&1 || "${kubectl[@]}" create namespace "$ns" >/dev/null
"${kubectl[@]}" -n "$ns" create secret generic clickhouse-admin --from-literal=username=admin \
  --from-literal=password="$password" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
cargo build --locked -q -p sentry-tenants
target/debug/sentry-tenants install -n "$ns" --clickhouse-url "$clickhouse_url"

cat <<MSG

  Local control plane: $KUBECONFIG (kubectl: ${kubectl[*]})
  ClickHouse: $clickhouse_url — the tests' HTTP STAND-IN, not a ClickHouse server (see README)
  Pods are run by the tests' STAND-IN kubelet (see README).

  Dashboard: http://127.0.0.1:8080 (this replica; Ctrl-C to stop it, then: bash scripts/cluster.sh down)

MSG
exec target/debug/sentry-tenants run --namespace "$ns" --identity "local-$(hostname)" --probe-addr 127.0.0.1:8081 \
  --clickhouse-url "$clickhouse_url"
