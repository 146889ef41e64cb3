#!/usr/bin/env bash
# Checks the monitoring `install --monitoring` ships (manifests/monitoring/): the alerting rules parse
# (`promtool check rules`), pass their unit tests (`promtool test rules tests/monitoring/alerts.test.yaml`),
# and every query of the Grafana dashboard parses as PromQL (each checked as a recording rule).
# promtool is built from tests/monitoring/go.mod into target/tools (cached).
#
#   bash scripts/monitoring.sh         the checks above
#   bash scripts/monitoring.sh crds    prints the directory holding the Prometheus Operator's CRDs
#                                      (from the module pinned in tests/monitoring/go.mod), for the
#                                      real control plane tier's monitoring test
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = crds ]; then
  dir=$(cd tests/monitoring && go mod download -json github.com/prometheus-operator/prometheus-operator |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  echo "$dir/example/prometheus-operator-crd"
  exit 0
fi

tools=$PWD/target/tools
if [ ! -x "$tools/promtool" ] || [ tests/monitoring/go.sum -nt "$tools/promtool" ]; then
  echo "monitoring: building promtool (tests/monitoring/go.mod; a few minutes the first time)" >&2
  (cd tests/monitoring && GOBIN=$tools GOFLAGS=-mod=mod go install github.com/prometheus/prometheus/cmd/promtool)
fi

"$tools/promtool" check rules manifests/monitoring/alerts.yaml
(cd tests/monitoring && "$tools/promtool" test rules alerts.test.yaml)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - manifests/monitoring/grafana-dashboard.json >"$work/dashboard-queries.yaml" <<'PY'
import json, sys

dashboard = json.load(open(sys.argv[1]))
queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
for v in dashboard["templating"]["list"]:
    if v["type"] == "query":
        # label_values(metric, label) is Grafana's, not PromQL: its metric is what must exist.
        queries.append(v["query"]["query"].split("(", 1)[1].split(",", 1)[0])
if not queries:
    sys.exit("monitoring: the dashboard has no query")
print("groups:\n  - name: grafana-dashboard\n    rules:")
for i, q in enumerate(queries):
    q = q.replace("$namespace", "sentry-tenants")
    print(f"      - record: dashboard_query_{i}\n        expr: {json.dumps(q)}")
PY
"$tools/promtool" check rules "$work/dashboard-queries.yaml" >/dev/null ||
  { echo "monitoring: a query of manifests/monitoring/grafana-dashboard.json is not PromQL (above)" >&2; exit 1; }
echo "monitoring: alerts checked and tested; $(grep -c 'record:' "$work/dashboard-queries.yaml") dashboard queries parse"
