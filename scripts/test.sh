#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, formatting, lints (host and the dashboard's wasm side),
# every test in the workspace, and one closing line with the totals.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's wall-clock seconds, for the run-times table this prints at the end (scripts/run_times.py).
times=$(mktemp)
trap 'rm -f "$times"' EXIT
mark() { echo "phase	$1	$SECONDS" >>"$times"; }
mark start
bash scripts/setup.sh
mark setup

# A cold run writes ~10 GiB under target/ (test binaries, the wasm build, the control plane, chdb). Say
# so before starting rather than as "No space left on device" twenty minutes in.
need_kib=$((10 * 1024 * 1024))
have_kib=$(du -sk target 2>/dev/null | cut -f1 || echo 0)
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
# A warm target/ needs room too: each test binary is relinked (~1 GiB), and a full disk shows only as
# the linker's "Bus error".
min_free_kib=$((4 * 1024 * 1024))
if [ "$((free_kib + ${have_kib:-0}))" -lt "$need_kib" ] || [ "$free_kib" -lt "$min_free_kib" ]; then
  echo "test: needs ~10 GiB for target/ and 4 GiB free ($((${have_kib:-0} / 1048576)) GiB there, $((free_kib / 1048576)) GiB free on $(df -P . | awk 'NR == 2 { print $6 }')); free some space" >&2
  exit 1
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The browser-only (`hydrate`) code of the dashboard, linted for the target it runs on.
cargo clippy --locked -p sentry-tenants-app --lib --target wasm32-unknown-unknown --features hydrate \
  --target-dir target/wasm -- -D warnings

# The release pipeline runs only on a tag, never here: its workflows and krew manifest are linted instead.
bash scripts/lint-release.sh
# The alerts and Grafana dashboard `install --monitoring` ships: promtool check and test rules.
bash scripts/monitoring.sh
mark "formatting and lints"

# The real control plane tier's cluster: built from tests/cluster/go.mod on first use (cached under
# target/k8s), started fresh for this run, stopped at the end. Failing to build or start it fails the run.
export SENTRY_TENANTS_CLUSTER_DIR=target/cluster-test
bash scripts/cluster.sh reset >/dev/null
SENTRY_TENANTS_E2E_KUBECONFIG=$(bash scripts/cluster.sh up)
export SENTRY_TENANTS_E2E_KUBECONFIG
mark "the local cluster up"

log=$(mktemp)
cargo_pid=
trap '[ -z "$cargo_pid" ] || kill "$cargo_pid" 2>/dev/null; rm -f "$log" "$times"; bash scripts/cluster.sh down >/dev/null 2>&1' EXIT
# Every process of the test run carries this mark in its environment (the cluster's daemons drop it), so
# whatever a test leaves behind is found below. cargo writes to a file, not a pipe: a leftover process
# holding the pipe would keep a reader such as tee waiting for ever.
run_mark="$$-$(date +%s%N)"
set +e
SENTRY_TENANTS_TEST_RUN=$run_mark cargo test --workspace --locked --no-fail-fast >"$log" 2>&1 &
cargo_pid=$!
tail -n +1 -f --pid="$cargo_pid" "$log"
wait "$cargo_pid"
status=$?
cargo_pid=
mark "cargo test (builds and every test binary)"
set -e

# Nothing a test started may outlive the run (tests/src/processes.rs kills what each test started
# when it ends, however it ends): anything still carrying the mark is named, killed and counted.
leaked=$(python3 - "SENTRY_TENANTS_TEST_RUN=$run_mark" <<'PY'
import os, sys
mark = sys.argv[1].encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if mark not in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
            continue
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue  # gone meanwhile
    if state not in ("Z", "X"):
        print(pid, cmd.strip()[:200])
PY
)
if [ -n "$leaked" ]; then
  while read -r pid cmd; do
    echo "leaked: $cmd"
    kill -KILL "$pid" 2>/dev/null || true
  done <<<"$leaked"
  echo "test result: FAILED. 0 passed; $(wc -l <<<"$leaked") failed; 0 ignored; 0 measured; 0 filtered out (processes left running)" >>"$log"
  status=1
fi

# Over the whole run, not just per test: any request of one of our ServiceAccounts that the apiserver
# forbade means the RBAC we ship is short of what the code does. One refusal is not about RBAC: new
# objects (an operator's last Events) in a namespace being deleted, which the apiserver refuses
# whatever the RBAC says (cause NamespaceTerminating; the namespace-first uninstall test does that).
forbidden=$(python3 - "$SENTRY_TENANTS_CLUSTER_DIR/audit.log" <<'PY'
import json, os, sys
# Windows in which a restarted apiserver had not filled its RBAC caches yet (scripts/cluster.sh
# restart-apiserver): it forbids everyone then, whatever the RBAC says.
restarts = os.path.join(os.path.dirname(sys.argv[1]), "apiserver-restarts")
windows = [l.split() for l in open(restarts)] if os.path.exists(restarts) else []
for line in open(sys.argv[1]):
    e = json.loads(line)
    user = e.get("user", {}).get("username", "")
    name = user.rsplit(":", 1)[-1]
    received = e.get("requestReceivedTimestamp", "")
    if any(start <= received <= end for start, end in windows):
        continue
    causes = e.get("responseStatus", {}).get("details", {}).get("causes", [])
    if any(c.get("reason") == "NamespaceTerminating" for c in causes):
        continue
    if e.get("responseStatus", {}).get("code") == 403 and user.startswith("system:serviceaccount:") \
            and name in ("sentry-tenants", "sentry-tenants-provisioner"):
        print(f"  {e['verb']} {e['requestURI']} as {user}")
PY
)
if [ -n "$forbidden" ]; then
  echo "audit: the apiserver forbade requests of our ServiceAccounts:"
  echo "$forbidden"
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (audit log check)" >>"$log"
  status=1
else
  echo "audit: no request of our ServiceAccounts was forbidden ($(wc -l <"$SENTRY_TENANTS_CLUSTER_DIR/audit.log") requests audited)"
fi
# cargo prints one "test result" line per test binary, the last usually for doc tests with nothing in
# them; this line sums them all.
mark "the audit log checked"
python3 scripts/run_times.py "$times" "$log" | tee target/test-times.md
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i; if ($(i+1) ~ /^ignored;?$/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
