#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, for the end-to-end tier and for trying sentry-tenants without
# a cluster. Everything is built from pinned Go modules (tests/cluster/go.mod: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl; tests/node/go.mod: containerd 2
# with its runc shim, CoreDNS, the pause program) or taken from Debian (runc, the CNI plugins, the
# docker-registry, iptables). The control plane runs on 127.0.0.1; the node runs in a network namespace
# of its own (st<X>), reached from this host over a veth pair:
#
#   host  st<X>  10.245.<X>.1  ── veth ──  10.245.<X>.2  eth0  node (kubelet, containerd, kube-proxy, CoreDNS)
#                                                             cni0 10.244.<X>.1/24: the pods
#   routes on the host: 10.244.<X>.0/24 (pods) and 10.96.<X>.0/24 (Services) via the node
#
# so kube-proxy's iptables rules, the pods' bridge and their network namespaces live in the node's
# namespace, not the host's, and two clusters (one per state directory) never share any of it.
#
#   scripts/cluster.sh build   build the binaries once into target/k8s/<version>/bin (cached)
#   scripts/cluster.sh up      build if needed, start, wait for the node to be Ready, print the kubeconfig
#   scripts/cluster.sh env     print the exports to use it (eval "$(scripts/cluster.sh env)")
#   scripts/cluster.sh restart-apiserver   stop kube-apiserver and start it again on the same port
#   scripts/cluster.sh down    stop what `up` started (by pid) and keep the state for inspection
#   scripts/cluster.sh reset   down, then remove the state (etcd data, certificates, images, logs)
#
# `up` also starts a registry (Debian's docker-registry) that the node pulls from, pushes the pause image
# and the operator image of this checkout to it (scripts/image.sh), and starts the ClickHouse HTTP
# stand-in behind the Service clickhouse.clickhouse.svc. State lives in $SENTRY_TENANTS_CLUSTER_DIR
# (default target/cluster): pki/, etcd/, logs/, pids/, containerd/, kubelet/, registry/, audit.log
# (every request, JSON lines) and admin.kubeconfig; the node's runtime sockets are under
# /run/sentry-tenants/st<X> (a unix socket's path must be short), removed by `down`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

k8s_version=v1.36.3 # k8s.io/kubernetes in tests/cluster/go.mod
containerd_version=v2.4.2 # github.com/containerd/containerd/v2 in tests/node/go.mod
bin="$root/target/k8s/$k8s_version/bin"
dir=$(realpath -m "${SENTRY_TENANTS_CLUSTER_DIR:-target/cluster}")
node_name=node
# The shape of a state directory (networks, certificates, the Service range): one made by an older
# shape of this script is started afresh rather than half reused.
layout=node-in-netns-1

say() { echo "cluster: $*" >&2; }

version_flags() { # module-path-of-version-package...
  local ld="-s -w" pkg
  # Without these the binaries report v0.0.0-master, and version checks (ours included) refuse them.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 -X $pkg.gitTreeState=clean"
  done
  ld="$ld -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
  ld="$ld -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
  echo "$ld"
}

build() {
  local want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
    containerd containerd-shim-runc-v2 ctr coredns pause)
  local missing=0 b
  for b in "${want[@]}"; do [ -x "$bin/$b" ] || missing=1; done
  if [ "$missing" = 0 ]; then
    return
  fi
  command -v go >/dev/null || { say "Go is needed to build the cluster (go.dev toolchain >= 1.26)"; exit 1; }
  say "building the control plane and the node ($k8s_version, containerd $containerd_version; once, cached in target/k8s)"
  local started=$SECONDS ld
  ld=$(version_flags)
  mkdir -p "$bin.tmp"
  (cd tests/cluster && go build -buildvcs=false -trimpath -ldflags "$ld" -o "$bin.tmp/" tool)
  mv "$bin.tmp/server" "$bin.tmp/etcd" 2>/dev/null || true
  # Static, without cgo: the storage drivers this node does not use (btrfs, devmapper, zfs) stay out.
  (cd tests/node && CGO_ENABLED=0 go build -buildvcs=false -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "$ld" -o "$bin.tmp/" tool ./coredns ./pause)
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  say "built in $((SECONDS - started)) s"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The port `name` had before if it is still free, else a free one, kept in ports/<name>. A cluster that
# comes back on its old ports keeps what refers to them: the images pushed to its registry, and the
# `kubernetes` Service's endpoint, which a restarted apiserver on another port does not correct.
sticky_port() { # name
  local port
  port=$(cat "$dir/ports/$1" 2>/dev/null || true)
  if [ -z "$port" ] || ! python3 -c "
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: a closed connection's TIME_WAIT does not count
s.bind(('0.0.0.0', int(sys.argv[1])))" "$port" 2>/dev/null; then
    port=$(free_port)
    echo "$port" >"$dir/ports/$1"
  fi
}

running() { # name
  local pid
  pid=$(cat "$dir/pids/$1" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}

# The index X of this state directory's networks, chosen once and kept: no other state directory and
# no interface of this host uses it.
subnet() {
  if [ ! -f "$dir/subnet" ]; then
    local x
    for x in $(seq 1 250); do
      if ! ip link show "st$x" >/dev/null 2>&1 && ! ip netns list | grep -qw "st$x" \
        && [ ! -e "/run/sentry-tenants/st$x" ] && ! grep -qsx "$x" "$root"/target/*/subnet; then
        echo "$x" >"$dir/subnet"
        break
      fi
    done
  fi
  cat "$dir/subnet"
}

# Which state directory holds X now (another checkout's cluster may have taken a free X meanwhile):
# `up` claims it, `down` cleans up X's network and cgroups only when it is this directory's.
owner_file() { echo "/run/sentry-tenants/st$1/owner"; }
claim() {
  local owner
  owner=$(cat "$(owner_file "$1")" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$dir" ]; then
    say "st$1 (10.244.$1.0/24) is in use by the cluster of $owner: stop it, or reset this one to get another"
    exit 1
  fi
  mkdir -p "/run/sentry-tenants/st$1"
  echo "$dir" >"$(owner_file "$1")"
}
ours() {
  local owner
  owner=$(cat "$(owner_file "$1")" 2>/dev/null || true)
  [ -z "$owner" ] || [ "$owner" = "$dir" ]
}

host_ip() { echo "10.245.$1.1"; }
node_ip() { echo "10.245.$1.2"; }
service_cidr() { echo "10.96.$1.0/24"; }
in_node() { nsenter --net="/run/netns/st$x" "$@"; }

network_up() {
  local x=$1
  ip netns list | grep -qw "st$x" || ip netns add "st$x"
  if ! ip link show "st$x" >/dev/null 2>&1; then
    ip link add "st$x" type veth peer name eth0 netns "st$x"
    ip addr add "$(host_ip "$x")/30" dev "st$x"
    ip -n "st$x" addr add "$(node_ip "$x")/30" dev eth0
  fi
  ip link set "st$x" up
  ip -n "st$x" link set lo up
  ip -n "st$x" link set eth0 up
  ip -n "st$x" route replace default via "$(host_ip "$x")"
  ip route replace "10.244.$x.0/24" via "$(node_ip "$x")"
  ip route replace "$(service_cidr "$x")" via "$(node_ip "$x")"
  # The node forwards between its pods, its veth and the Services' DNAT (settings of its namespace only).
  in_node sysctl -qw net.ipv4.ip_forward=1
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

network_down() {
  local x pid
  x=$(cat "$dir/subnet" 2>/dev/null) || return 0
  # Whatever still runs in the node's namespace (a container whose shim was killed, say).
  for pid in $(ip netns pids "st$x" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip route del "10.244.$x.0/24" 2>/dev/null || true
  ip route del "$(service_cidr "$x")" 2>/dev/null || true
  ip link del "st$x" 2>/dev/null || true
  ip netns del "st$x" 2>/dev/null || true
}

# Certificates and keys, made once per state directory: one CA for serving and client certificates, the
# service-account signing key, and a client certificate per component.
pki() {
  local p=$dir/pki x=$1
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
      "IP:127.0.0.1,IP:$(host_ip "$x"),IP:10.96.$x.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=sentry-tenants-admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    cert kube-proxy "/CN=system:kube-proxy"
    cert coredns "/CN=system:coredns"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    # The kubelet's serving certificate: the apiserver verifies it for logs, exec and port-forward.
    cert kubelet-serving "/CN=system:node:$node_name" "IP:$(node_ip "$x"),DNS:$node_name"
    cert kubelet "/O=system:nodes/CN=system:node:$node_name"
    touch done
  )
}

kubeconfig() { # file user cert [server]
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: ${4:-https://127.0.0.1:$(cat "$dir/ports/apiserver")}
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

wait_until() { # what description command...
  local what=$1 description=$2 started=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ! running "$what"; then
      say "$what exited; the end of $dir/logs/$what.log:"
      tail -20 "$dir/logs/$what.log" >&2
      exit 1
    fi
    if [ $((SECONDS - started)) -gt 300 ]; then
      say "$what: $description not within 300 s; see $dir/logs/$what.log"
      exit 1
    fi
    sleep 0.5
  done
}

wait_for() { # what url [curl args...]
  local what=$1 url=$2
  shift 2
  wait_until "$what" "no answer on $url" curl -fsS "$@" "$url"
}

kubectl() { "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }

# The apiserver alone, on the port `up` chose: `up` starts it, `restart-apiserver` stops and starts it
# again (the tests' drill of an apiserver restart mid-run), appending to the same audit log.
start_apiserver() {
  local x etcd_client apiserver
  x=$(cat "$dir/subnet")
  etcd_client=$(cat "$dir/ports/etcd-client")
  apiserver=$(cat "$dir/ports/apiserver")
  # Advertised at the host's end of the node's link: the `kubernetes` Service's endpoint, which pods
  # reach through kube-proxy.
  start kube-apiserver "$bin/kube-apiserver" \
    --bind-address 0.0.0.0 --advertise-address "$(host_ip "$x")" --secure-port "$apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_client" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range "$(service_cidr "$x")" \
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

# The binaries of this checkout that `up` runs or puts in an image.
build_rust() {
  say "building sentry-tenants and the ClickHouse stand-in (cargo, dev profile)"
  cargo build --locked -q -p sentry-tenants --bin sentry-tenants -p sentry-tenants-tests --bin clickhouse-stand-in
}

start_control_plane() {
  local x=$1 p
  for p in etcd-client etcd-peer apiserver controller-manager scheduler; do sticky_port "$p"; done
  local etcd_client etcd_peer
  etcd_client=$(cat "$dir/ports/etcd-client")
  etcd_peer=$(cat "$dir/ports/etcd-peer")
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
# The Job controller's status writes with their body: when each Job finished, which the bench reads
# to count the runs in flight (the cap's proof).
- level: Request
  verbs: ["update", "patch"]
  resources:
  - group: batch
    resources: ["jobs/status"]
# Our own objects' writes with their body: the write budget test names what each status write changed.
- level: Request
  verbs: ["update", "patch"]
  resources:
  - group: sentry.io
    resources: ["tenants", "tenants/status", "runjobs", "runjobs/status"]
# Self access reviews with what they asked: the copies' test counts the operator's consent checks
# apart from its other reviews.
- level: Request
  verbs: ["create"]
  resources:
  - group: authorization.k8s.io
    resources: ["selfsubjectaccessreviews"]
- level: Metadata
EOF
  start_apiserver

  kubeconfig "$dir/admin.kubeconfig" admin admin
  # A port that had to change since the state was made stays in the `kubernetes` Service's endpoint
  # (the apiserver does not correct it); deleted, the apiserver writes it anew within seconds.
  local published
  published=$(kubectl -n default get endpointslice kubernetes -o jsonpath='{.ports[0].port}' 2>/dev/null || true)
  if [ -n "$published" ] && [ "$published" != "$(cat "$dir/ports/apiserver")" ]; then
    kubectl -n default delete endpointslice kubernetes --ignore-not-found >/dev/null
    kubectl -n default delete endpoints kubernetes --ignore-not-found >/dev/null 2>&1
  fi
  local c
  for c in controller-manager scheduler kube-proxy coredns kubelet; do
    # The node's parts reach the apiserver as the pods do not: directly, at the host's end of the link.
    kubeconfig "$dir/$c.kubeconfig" "$c" "$c" "https://$(host_ip "$x"):$(cat "$dir/ports/apiserver")"
  done
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(cat "$dir/ports/controller-manager")" \
    --leader-elect=false --use-service-account-credentials \
    --controllers '*,-bootstrapsigner,-tokencleaner,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller' \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --service-cluster-ip-range "$(service_cidr "$x")"
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(cat "$dir/ports/scheduler")" --leader-elect=false
  wait_for kube-controller-manager "https://127.0.0.1:$(cat "$dir/ports/controller-manager")/healthz" -k
  wait_for kube-scheduler "https://127.0.0.1:$(cat "$dir/ports/scheduler")/healthz" -k
}

# The registry the node pulls from: Debian's docker-registry (the CNCF distribution, v2 API), plain HTTP
# on the host's end of the node's link; containerd is told so in its hosts.toml.
start_registry() {
  local x=$1 port
  sticky_port registry
  port=$(cat "$dir/ports/registry")
  mkdir -p "$dir/registry-data"
  cat >"$dir/registry.yaml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $dir/registry-data}
  delete: {enabled: true}
http:
  addr: $(host_ip "$x"):$port
EOF
  start registry docker-registry serve "$dir/registry.yaml"
  echo "$(host_ip "$x"):$port" >"$dir/registry"
  wait_for registry "http://$(host_ip "$x"):$port/v2/"
}

# The sandbox image every pod starts with: tests/node/pause, built above, in an image of its own.
push_pause_image() {
  local registry
  registry=$(cat "$dir/registry")
  python3 scripts/oci_image.py "$dir/images/pause" --tag 3.10 --file "$bin/pause=/pause" \
    --user 65535:65535 --entrypoint '["/pause"]' >/dev/null 2>&1
  skopeo copy -q --dest-tls-verify=false "oci:$dir/images/pause:3.10" "docker://$registry/pause:3.10"
}

start_containerd() {
  local x=$1 run=/run/sentry-tenants/st$1 c=$dir/containerd
  mkdir -p "$c/certs.d/$(cat "$dir/registry")" "$dir/cni/net.d" "$run"
  cat >"$c/certs.d/$(cat "$dir/registry")/hosts.toml" <<EOF
server = "http://$(cat "$dir/registry")"
[host."http://$(cat "$dir/registry")"]
  capabilities = ["pull", "resolve"]
EOF
  cat >"$dir/cni/net.d/10-pods.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
              "ranges": [[{"subnet": "10.244.$x.0/24", "gateway": "10.244.$x.1"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$c/config.toml" <<EOF
version = 3
root = "$c/root"
state = "$run/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$(cat "$dir/registry")/pause:3.10"
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$c/certs.d"
  [plugins."io.containerd.cri.v1.runtime"]
    netns_mounts_under_state_dir = true
    # This machine lets no process lower its OOM score (not even root: CAP_SYS_RESOURCE is not granted),
    # which the kubelet asks for its pods' sandboxes (-998): keep every score at or above containerd's.
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    enable_criu = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$dir/cni/net.d"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      Root = "$run/runc"
      SystemdCgroup = false
  [plugins."io.containerd.internal.v1.opt"]
    path = "$c/opt"
  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = "$run/s"
  [plugins."io.containerd.image-verifier.v1.bindir"]
    bin_dir = "$c/image-verifier"
[cgroup]
  path = "/sentry-tenants-st$x/containerd"
EOF
  # The socket answers before the CRI service has recovered the containers of an earlier run, and a
  # kubelet started then exits ("server is not initialized yet"): wait for this start's boot line.
  local logged
  logged=$({ wc -l <"$dir/logs/containerd.log"; } 2>/dev/null || echo 0)
  start containerd nsenter --net="/run/netns/st$x" env PATH="$bin:/usr/sbin:/usr/bin:/sbin:/bin" "$bin/containerd" --config "$c/config.toml"
  wait_until containerd "its boot (the CRI service ready)" \
    sh -c "tail -n +$((logged + 1)) '$dir/logs/containerd.log' | grep -q 'containerd successfully booted'"
}

start_kubelet() {
  local x=$1 run=/run/sentry-tenants/st$1
  mkdir -p "$dir/kubelet" "$dir/pod-logs"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(node_ip "$x")
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$run/containerd.sock
podLogsDir: $dir/pod-logs
cgroupDriver: cgroupfs
cgroupRoot: /sentry-tenants-st$x
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$(node_ip "$x")]
# This machine's disk is shared and often well used: evict only when it is really full.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 250
rotateCertificates: false
EOF
  kubelet_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  start kubelet nsenter --net="/run/netns/st$x" "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" --hostname-override "$node_name" \
    --node-ip "$(node_ip "$x")"
}

start_kube_proxy() {
  local x=$1
  cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: 10.244.$x.0/24
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# The conntrack table's size is the host's, not the node namespace's: leave it alone.
conntrack: {maxPerCore: 0, min: 0}
EOF
  start kube-proxy nsenter --net="/run/netns/st$x" "$bin/kube-proxy" --config "$dir/kube-proxy.yaml"
}

# Cluster DNS: CoreDNS in the node's namespace at the node's address (the kubelet's clusterDNS), reading
# Services and EndpointSlices with a ClusterRole of its own.
start_coredns() {
  local x=$1
  kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
EOF
  cat >"$dir/Corefile" <<EOF
.:53 {
    bind $(node_ip "$x")
    errors
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/coredns.kubeconfig local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
EOF
  start coredns nsenter --net="/run/netns/st$x" "$bin/coredns" -conf "$dir/Corefile"
  wait_until coredns "/ready" in_node curl -fsS http://127.0.0.1:8181/ready
}

# The ClickHouse HTTP stand-in (tests/src/clickhouse_stand_in.rs; no ClickHouse >= 20.4 runs here) on
# this host, behind the Service clickhouse.clickhouse.svc:8123 (an EndpointSlice naming the host's end of
# the node's link), so an install's default URL shape works from the pods.
start_clickhouse() {
  local x=$1 url port
  [ -f "$dir/clickhouse-admin-password" ] || openssl rand -hex 16 >"$dir/clickhouse-admin-password"
  rm -f "$dir/clickhouse-stand-in.url"
  CLICKHOUSE_STAND_IN_ADMIN_PASSWORD=$(cat "$dir/clickhouse-admin-password") start clickhouse-stand-in \
    sh -c "exec \"\$0\" \"\$@\" >'$dir/clickhouse-stand-in.url'" "${CARGO_TARGET_DIR:-$root/target}/debug/clickhouse-stand-in" \
    --listen "$(host_ip "$x")" --admin-user admin
  wait_until clickhouse-stand-in "its URL" test -s "$dir/clickhouse-stand-in.url"
  url=$(cat "$dir/clickhouse-stand-in.url")
  port=${url##*:}
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: clickhouse}
---
apiVersion: v1
kind: Service
metadata: {name: clickhouse, namespace: clickhouse}
spec:
  ports: [{name: http, port: 8123, targetPort: $port, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: clickhouse-stand-in
  namespace: clickhouse
  labels: {kubernetes.io/service-name: clickhouse}
addressType: IPv4
ports: [{name: http, port: $port, protocol: TCP}]
endpoints: [{addresses: ["$(host_ip "$x")"]}]
EOF
}

# Ready as reported by this kubelet: the node object of an earlier run keeps saying Ready until the
# controller-manager notices it went quiet, so the heartbeat must be from after this kubelet's start.
node_ready_since() { # time
  local ready beat
  read -r ready beat < <("$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" get node "$node_name" \
    -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}')
  [ "$ready" = True ] && [[ ! "$beat" < "$1" ]]
}

wait_node_ready() {
  wait_until kubelet "node $node_name Ready" node_ready_since "$kubelet_started"
}

up() {
  build
  build_rust
  if [ -d "$dir" ] && [ "$(cat "$dir/layout" 2>/dev/null)" != "$layout" ]; then
    say "$dir was made by an older scripts/cluster.sh: starting it afresh"
    down_quietly
    rm -rf "$dir"
  fi
  mkdir -p "$dir"/{logs,pids,ports,etcd,images}
  echo "$layout" >"$dir/layout"
  local x
  x=$(subnet)
  pki "$x"
  if running kube-apiserver; then
    say "already up"
    echo "$dir/admin.kubeconfig"
    return
  fi
  down_quietly
  claim "$x"
  network_up "$x"
  start_control_plane "$x"
  start_registry "$x"
  push_pause_image
  start_containerd "$x"
  start_kubelet "$x"
  start_kube_proxy "$x"
  start_coredns "$x"
  start_clickhouse "$x"
  wait_node_ready
  SENTRY_TENANTS_CLUSTER_DIR=$dir bash scripts/image.sh >/dev/null
  say "up: kube-apiserver https://127.0.0.1:$(cat "$dir/ports/apiserver") ($k8s_version), node $node_name" \
    "(containerd $containerd_version) at $(node_ip "$x"), registry $(cat "$dir/registry"), logs in $dir/logs"
  echo "$dir/admin.kubeconfig"
}

env_exports() {
  local x
  x=$(cat "$dir/subnet")
  cat <<EOF
export KUBECONFIG=$dir/admin.kubeconfig
export PATH=$bin:\$PATH
export SENTRY_TENANTS_REGISTRY=$(cat "$dir/registry")
export SENTRY_TENANTS_IMAGE=$(cat "$dir/image" 2>/dev/null)
export SENTRY_TENANTS_CLICKHOUSE_URL=http://clickhouse.clickhouse.svc:8123
export SENTRY_TENANTS_CLICKHOUSE_HOST_URL=$(cat "$dir/clickhouse-stand-in.url")
export SENTRY_TENANTS_CLICKHOUSE_ADMIN_USER=admin
export SENTRY_TENANTS_CLICKHOUSE_ADMIN_PASSWORD=$(cat "$dir/clickhouse-admin-password")
EOF
}

kill_cgroup_tree() { # dir
  local procs pids
  for _ in $(seq 100); do
    procs=$(find "$1" -name cgroup.procs 2>/dev/null || true)
    [ -n "$procs" ] || return 0
    # shellcheck disable=SC2086 # one file name per word
    pids=$(cat $procs 2>/dev/null | sort -u || true)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  say "processes still in $1 after ten seconds"
}

down_quietly() {
  local f pid x
  # The kubelet first, so that no pod is restarted while the rest goes.
  if running kubelet; then
    kill "$(cat "$dir/pids/kubelet")" 2>/dev/null || true
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
  x=$(cat "$dir/subnet" 2>/dev/null) || return 0
  ours "$x" || return 0
  # The containers outlive containerd and the kubelet (their shims keep them, and a killed shim leaves
  # them to pid 1): every process in the node's cgroups goes, shims and containers alike, then what the
  # node mounted.
  kill_cgroup_tree "/sys/fs/cgroup/memory/sentry-tenants-st$x"
  network_down
  local m
  for m in $(awk -v a=" $dir/" -v b=" /run/sentry-tenants/st$x/" 'index(" " $2, a) == 1 || index(" " $2, b) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "/run/sentry-tenants/st$x"
  find "/sys/fs/cgroup/"*/"sentry-tenants-st$x" -depth -type d -exec rmdir {} + 2>/dev/null || true
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  env) env_exports ;;
  restart-apiserver) restart_apiserver ;;
  down) down_quietly && say "down" ;;
  reset) down_quietly && rm -rf "$dir" && say "reset" ;;
  *)
    echo "usage: scripts/cluster.sh build|up|env|restart-apiserver|down|reset" >&2
    exit 2
    ;;
esac
