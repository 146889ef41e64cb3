#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for the end-to-end tier and for trying sentry-tenants
# without a cluster: etcd, kube-apiserver and kube-controller-manager built from the Go modules pinned
# in tests/cluster/go.mod, plus kubectl, and the tests' stand-in kubelet (tests/src/kubelet: binds pods to
# its node and runs the project's own image as the project's binary, each pod in a network namespace on
# a bridge of this cluster's own). No kube-scheduler, kube-proxy or container runtime; see the README.
#
#   scripts/cluster.sh build   build the binaries once into target/k8s/<version>/bin (cached)
#   scripts/cluster.sh up      build if needed, start, wait for /readyz, print the kubeconfig path
#   scripts/cluster.sh env     print `export KUBECONFIG=…` (eval "$(scripts/cluster.sh env)")
#   scripts/cluster.sh restart-apiserver   stop kube-apiserver and start it again on the same port
#   scripts/cluster.sh down    stop what `up` started (by pid) and keep the state for inspection
#   scripts/cluster.sh reset   down, then remove the state (etcd data, certificates, logs)
#
# Pods of the project's image run $SENTRY_TENANTS_POD_BINARY (default target/debug/sentry-tenants; the
# bench runs the release binary). State lives in $SENTRY_TENANTS_CLUSTER_DIR (default target/cluster): pki/, etcd/, logs/, pids/,
# audit.log (every request, JSON lines) and admin.kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

k8s_version=v1.36.3 # k8s.io/kubernetes in tests/cluster/go.mod
bin="$root/target/k8s/$k8s_version/bin"
dir=$(realpath -m "${SENTRY_TENANTS_CLUSTER_DIR:-target/cluster}")
service_cidr=10.0.0.0/24 # never routed here: nothing runs kube-proxy; pods reach the API at the bridge's address

say() { echo "cluster: $*" >&2; }

build() {
  local want=(etcd kube-apiserver kube-controller-manager kubectl)
  local missing=0 b
  for b in "${want[@]}"; do [ -x "$bin/$b" ] || missing=1; done
  if [ "$missing" = 0 ]; then
    return
  fi
  command -v go >/dev/null || { say "Go is needed to build the control plane (go.dev toolchain >= 1.26)"; exit 1; }
  say "building etcd, kube-apiserver, kube-controller-manager and kubectl $k8s_version (once; cached in target/k8s)"
  local started=$SECONDS ld="-s -w" pkg
  # Without these the binaries report v0.0.0-master, and version checks (ours included) refuse them.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 -X $pkg.gitTreeState=clean"
  done
  mkdir -p "$bin.tmp"
  (cd tests/cluster && go build -buildvcs=false -trimpath -ldflags "$ld" -o "$bin.tmp/" tool)
  mv "$bin.tmp/server" "$bin.tmp/etcd" 2>/dev/null || true
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  say "built in $((SECONDS - started)) s"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() { # name
  local pid
  pid=$(cat "$dir/pids/$1" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}

# The pod network of this state directory: bridge st<X> with 10.244.<X>.1/24, X chosen once and kept.
subnet() {
  if [ ! -f "$dir/subnet" ]; then
    local x
    for x in $(seq 1 250); do
      if ! ip link show "st$x" >/dev/null 2>&1 && ! grep -qsx "$x" "$root"/target/*/subnet; then
        echo "$x" >"$dir/subnet"
        break
      fi
    done
  fi
  cat "$dir/subnet"
}

bridge_up() {
  local x=$1
  if ! ip link show "st$x" >/dev/null 2>&1; then
    ip link add "st$x" type bridge
    ip addr add "10.244.$x.1/24" dev "st$x"
  fi
  ip link set "st$x" up
}

bridge_down() {
  local x ns pid
  x=$(cat "$dir/subnet" 2>/dev/null) || return 0
  # Pods left behind by a kubelet that did not stop them: their processes, then their namespaces.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^st$x-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "st$x" 2>/dev/null || true
}

# Certificates and keys, made once per state directory: one CA for serving and client certificates, the
# service-account signing key, and a client certificate per component.
pki() {
  local p=$dir/pki gateway=10.244.$1.1
  [ -f "$p/done" ] && return
  mkdir -p "$p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=sentry-tenants-test-ca" 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    cert() { # name subject [san]
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      if [ -n "${3:-}" ]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
      else
        printf 'extendedKeyUsage=clientAuth\n' >"$1.ext"
      fi
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 \
        -extfile "$1.ext" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver "/CN=kube-apiserver" \
      "IP:127.0.0.1,IP:$gateway,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    cert admin "/O=system:masters/CN=sentry-tenants-admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    # The stand-in kubelet's serving certificate: the apiserver verifies it for pods/log and port-forward.
    cert kubelet-serving "/CN=system:node:stand-in" "IP:$gateway,IP:127.0.0.1,DNS:localhost"
    cert kubelet-client "/O=system:nodes/CN=system:node:stand-in"
    touch done
  )
}

kubeconfig() { # file user cert
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$(cat "$dir/ports/apiserver")
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$3.crt
    client-key: $dir/pki/$3.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
EOF
}

start() { # name command...
  local name=$1
  shift
  # The cluster outlives any one test, also when a test restarts part of it: not a process of the test
  # run for scripts/test.sh's leak check, nor of the test that asked (tests/src/processes.rs).
  env -u SENTRY_TENANTS_TEST_RUN -u SENTRY_TENANTS_TEST_OWNER "$@" >>"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/pids/$name"
}

wait_for() { # what url [curl args...]
  local what=$1 url=$2 started=$SECONDS
  shift 2
  until curl -fsS "$@" "$url" >/dev/null 2>&1; do
    if ! running "$what"; then
      say "$what exited; the end of $dir/logs/$what.log:"
      tail -20 "$dir/logs/$what.log" >&2
      exit 1
    fi
    if [ $((SECONDS - started)) -gt 300 ]; then
      say "$what did not answer $url within 300 s; see $dir/logs/$what.log"
      exit 1
    fi
    sleep 0.5
  done
}

# The apiserver alone, on the port `up` chose: `up` starts it, `restart-apiserver` stops and starts it
# again (the tests' drill of an apiserver restart mid-run), appending to the same audit log.
start_apiserver() {
  local etcd_client=$(cat "$dir/ports/etcd-client") apiserver=$(cat "$dir/ports/apiserver")
  start kube-apiserver "$bin/kube-apiserver" \
    --bind-address 0.0.0.0 --advertise-address 127.0.0.1 --secure-port "$apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_client" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range "$service_cidr" --endpoint-reconciler-type none \
    --kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$dir/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$dir/pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" --audit-log-format json \
    --audit-log-mode blocking --audit-log-maxsize 0
  wait_for kube-apiserver "https://127.0.0.1:$apiserver/readyz" --cacert "$dir/pki/ca.crt" \
    --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key"
}

restart_apiserver() {
  running kube-apiserver || { say "kube-apiserver is not running (run up first)"; exit 1; }
  local pid began
  pid=$(cat "$dir/pids/kube-apiserver")
  began=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
  kill "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  start_apiserver
  # A restarted apiserver serves requests before its RBAC caches are filled, and forbids everyone
  # (the controller-manager too) for that moment. The audit checks skip 403s in this window: from the
  # stop until ten seconds after /readyz answered.
  echo "$began $(date -u -d '+10 seconds' +%Y-%m-%dT%H:%M:%S.%6NZ)" >>"$dir/apiserver-restarts"
  say "kube-apiserver restarted"
}

# The stand-in kubelet and the binary it runs for the project's image, from this checkout.
build_rust() {
  say "building the stand-in kubelet and sentry-tenants (cargo, dev profile)"
  cargo build --locked -q -p sentry-tenants --bin sentry-tenants -p sentry-tenants-tests --bin stand-in-kubelet
}

up() {
  build
  build_rust
  mkdir -p "$dir"/{logs,pids,ports,etcd}
  local x
  x=$(subnet)
  pki "$x"
  if running kube-apiserver; then
    say "already up"
    echo "$dir/admin.kubeconfig"
    return
  fi
  down_quietly
  local p
  for p in etcd-client etcd-peer apiserver controller-manager; do free_port >"$dir/ports/$p"; done
  local etcd_client=$(cat "$dir/ports/etcd-client") etcd_peer=$(cat "$dir/ports/etcd-peer")
  local apiserver=$(cat "$dir/ports/apiserver")

  start etcd "$bin/etcd" --name local --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --quota-backend-bytes 4294967296
  wait_for etcd "http://127.0.0.1:$etcd_client/health"

  # Every request, with who made it and the answer's code: the tests fail on any 403 for our accounts.
  cat >"$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
  start_apiserver

  kubeconfig "$dir/admin.kubeconfig" admin admin
  kubeconfig "$dir/controller-manager.kubeconfig" controller-manager controller-manager
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(cat "$dir/ports/controller-manager")" \
    --leader-elect=false --use-service-account-credentials \
    --controllers '*,-bootstrapsigner,-tokencleaner,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller' \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --service-cluster-ip-range "$service_cidr"
  wait_for kube-controller-manager "https://127.0.0.1:$(cat "$dir/ports/controller-manager")/healthz" -k

  bridge_up "$x"
  local target=${CARGO_TARGET_DIR:-$root/target}
  start stand-in-kubelet "$target/debug/stand-in-kubelet" --kubeconfig "$dir/admin.kubeconfig" \
    --bridge "st$x" --subnet "10.244.$x" --apiserver-port "$apiserver" \
    --image "ghcr.io/sentry-tenants/sentry-tenants=${SENTRY_TENANTS_POD_BINARY:-$target/debug/sentry-tenants}" \
    --state-dir "$dir/kubelet" --client-ca "$dir/pki/ca.crt" \
    --serving-cert "$dir/pki/kubelet-serving.crt" --serving-key "$dir/pki/kubelet-serving.key"
  local started=$SECONDS
  until "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" get node stand-in >/dev/null 2>&1; do
    running stand-in-kubelet || { say "the stand-in kubelet exited:"; tail -20 "$dir/logs/stand-in-kubelet.log" >&2; exit 1; }
    [ $((SECONDS - started)) -lt 120 ] || { say "no Node registered within 120 s"; exit 1; }
    sleep 0.5
  done
  say "up: kube-apiserver https://127.0.0.1:$apiserver ($k8s_version), node stand-in on st$x, logs in $dir/logs"
  echo "$dir/admin.kubeconfig"
}

down_quietly() {
  local f pid
  # The kubelet first, so that no pod is restarted while the rest goes.
  if running stand-in-kubelet; then
    kill "$(cat "$dir/pids/stand-in-kubelet")" 2>/dev/null || true
  fi
  for f in "$dir"/pids/*; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  for f in "$dir"/pids/*; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    # Each exits on SIGTERM; a stuck one is killed after ten seconds.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  bridge_down
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  env) echo "export KUBECONFIG=$dir/admin.kubeconfig" ;;
  restart-apiserver) restart_apiserver ;;
  down) down_quietly && say "down" ;;
  reset) down_quietly && rm -rf "$dir" && say "reset" ;;
  *)
    echo "usage: scripts/cluster.sh build|up|env|restart-apiserver|down|reset" >&2
    exit 2
    ;;
esac
