#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, on loopback, for the tests and benchmarks that need one:
# etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager, kube-scheduler with the mgpu extender
# configured as deploy/extender/scheduler-config.yaml ships it, and (unless --no-kubelet) one node: a kubelet
# named `localhost` with containerd (CDI on, runc and the CNI plugins from Debian, a private bridge), plus any
# number of API-only nodes for scale. Nothing of the host's own services is touched: every file lives under
# the state folder, every port is the port base plus a fixed offset, every process is stopped by its pid.
#
#   scripts/cluster.sh up [--state-dir DIR] [--port-base N] [--no-kubelet] [--api-nodes N]
#                         [--api-node-cards SPEC] [--api-node-list FILE] [--confirm-after-ms MS]
#                         [--scheduler-qps N] [--controller-qps N] [--inventory FILE] [--scheduler-config FILE]
#                         [--node-grace-period DURATION] [--api-node-config FILE]
#   scripts/cluster.sh deploy [--state-dir DIR]   mgpu as an operator installs it (scripts/cluster-deploy.sh)
#   scripts/cluster.sh status [--state-dir DIR]   each component, running or not; exit 1 when one is down
#   scripts/cluster.sh logs [--state-dir DIR] [--lines N]   every component's last lines
#   scripts/cluster.sh restart NAME [--state-dir DIR] [--signal KILL|TERM]   kills a component (default
#                                                 SIGKILL: a crash) and starts it again as it was started
#   scripts/cluster.sh pause|resume NAME [--state-dir DIR]   stops a component (SIGTERM), starts it again
#   scripts/cluster.sh down [--state-dir DIR]     stops everything, unmounts, deletes the bridge, keeps logs
#   scripts/cluster.sh binaries                   prints the folder of the Kubernetes binaries
#
# State folder: --state-dir or MGPU_CLUSTER_DIR (default /tmp/mgpu-cluster); port base: --port-base or
# MGPU_CLUSTER_PORT_BASE (default 26400), ports base+0 .. base+9 (offsets below): keep them below the kernel's
# ephemeral range (net.ipv4.ip_local_port_range, 32768 and up), or an outgoing connection may hold one. `up` writes
# DIR/kubeconfig (cluster admin), DIR/env (KUBECONFIG, the ports, the binaries' folder; source it) and
# DIR/logs/. --api-nodes N adds N nodes that only exist in the API server (nodes api-node-0000 ...), with the
# cards of --api-node-cards (`COUNTxMiB` per node, comma-separated shapes taken in turn; default 2x24576),
# kept Ready by mgpu-api-nodes (src/tools/); build it first (bash scripts/setup.sh mgpu-api-nodes).
# --api-node-list FILE instead: the API-only nodes of FILE, each with its own name, CPU, memory and cards
# (mgpu-api-nodes --node-list; mgpu_trace_replay --export writes the openb trace's cluster so). With
# --confirm-after-ms it also writes each GPU pod's assignment as gpu-allocated that long after its bind (the
# device plugin's confirmation before issue 27, which it now writes only where the devices differ).
# --api-node-config: the daemons' config.yaml the API-only nodes' stand-ins publish their inventory under (its
# memoryUnitMiB and resourceDomain; default mgpu-api-nodes' built-in config, a unit of 1 MiB): pass the one the
# extender runs with, or it finds every node's unit different from its own and uses none of them.
# --node-grace-period: how long the node lifecycle controller waits for a node's Lease before it marks the
# node NotReady and taints it (its --node-monitor-grace-period and --node-startup-grace-period; default 50s
# and 1m): on a loaded machine mgpu-api-nodes renews 1,000 leases and more late, and the nodes flap
# (bench/realcluster_openb.sh, whose placement must see every node, passes 1h).
# --scheduler-qps: kube-scheduler's client QPS and burst (default: kube-scheduler's own, 50 and 100).
# --controller-qps: kube-controller-manager's client QPS and burst, per controller (default: its own, 20 and
# 30). Its ResourceClaim controller makes two API calls for every pod of a ResourceClaimTemplate (the claim,
# the pod's status), so that by default DRA pods reach the scheduler at about 10 a second.
# --inventory: the kubelet node's cards for the device plugin's static backend (deploy/overlays/
# static-test-node; default its inventory.yaml).
# --scheduler-config: kube-scheduler's configuration to start from (default deploy/extender/scheduler-config.yaml
# as shipped; the benchmark passes its two-verb variant); only this machine's names are replaced in it.
# --profiling: kube-apiserver, kube-controller-manager and kube-scheduler serve /debug/pprof on their secure
# ports (off otherwise; the benchmark's --profile reads them with the admin certificate).
#
# Binaries: MGPU_K8S_BIN (a folder with kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and,
# for a kubelet, kubelet, containerd, containerd-shim-runc-v2, ctr); by default the archives of
# ../shared/k8s/ are checked against their SHA256SUMS and unpacked once into MGPU_K8S_CACHE (default
# ~/.cache/mgpu-k8s). Without them every command but down says so in one sentence and exits 3 (the tests
# report that as skipped).
#
# Only one kubelet can run on a machine: its device-plugin folder /var/lib/kubelet/device-plugins does not
# move with --root-dir, and the kubelet deletes every socket in it when it starts. `up` with a kubelet holds
# the lock /run/mgpu-cluster-kubelet.lock until `down`, and fails with one sentence naming the holder's state
# folder when another cluster holds it. Clusters without a kubelet need only their own state folder and
# ports.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
readonly repo
readonly kubelet_lock=/run/mgpu-cluster-kubelet.lock
# The node's address: kubelets refuse a loopback --node-ip, so the node lives on its own bridge (no route,
# no forwarding, no masquerade), which also carries the pods' network.
readonly bridge=mgpu-cni0 node_ip=10.217.0.1 pod_subnet=10.217.0.0/24 service_range=10.217.128.0/24

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

command=${1:-}
[ $# -gt 0 ] && shift
state=${MGPU_CLUSTER_DIR:-/tmp/mgpu-cluster}
port_base=${MGPU_CLUSTER_PORT_BASE:-26400}
with_kubelet=1
api_nodes=0
api_node_cards=2x24576
api_node_list=""
api_node_config=""
confirm_after_ms=0
scheduler_qps="" controller_qps_flags=()
inventory=$repo/deploy/overlays/static-test-node/inventory.yaml
scheduler_config=$repo/deploy/extender/scheduler-config.yaml
profiling=false
node_grace_flags=()
lines=30
signal=KILL
target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    --no-kubelet) with_kubelet=0; shift ;;
    --api-nodes) api_nodes=$2; shift 2 ;;
    --api-node-cards) api_node_cards=$2; shift 2 ;;
    --api-node-list) api_node_list=$2; shift 2 ;;
    --api-node-config) api_node_config=$2; shift 2 ;;
    --confirm-after-ms) confirm_after_ms=$2; shift 2 ;;
    --scheduler-qps) scheduler_qps=$2; shift 2 ;;
    --controller-qps) controller_qps_flags=(--kube-api-qps "$2" --kube-api-burst "$2"); shift 2 ;;
    --inventory) inventory=$2; shift 2 ;;
    --scheduler-config) scheduler_config=$2; shift 2 ;;
    --profiling) profiling=true; shift ;;
    --node-grace-period) node_grace_flags=(--node-monitor-grace-period "$2" --node-startup-grace-period "$2"); shift 2 ;;
    --lines) lines=$2; shift 2 ;;
    --signal) signal=$2; shift 2 ;;
    -*) die "unknown argument $1 (see the usage at the top of the script)" ;;
    *)
      case "$command" in
        restart | pause | resume) [ -z "$target" ] || die "one component at a time, not $target and $1."; target=$1; shift ;;
        *) die "unknown argument $1 (see the usage at the top of the script)" ;;
      esac
      ;;
  esac
done
mkdir -p "$state"
state=$(cd "$state" && pwd)
readonly state

# Ports: base + offset.
readonly etcd_port=$((port_base)) etcd_peer_port=$((port_base + 1)) apiserver_port=$((port_base + 2))
readonly controller_manager_port=$((port_base + 3)) scheduler_port=$((port_base + 4))
readonly kubelet_port=$((port_base + 5)) kubelet_healthz_port=$((port_base + 6))
readonly extender_port=$((port_base + 7)) plugin_metrics_port=$((port_base + 8))

# The folder of the Kubernetes binaries, unpacked from ../shared/k8s/ into the cache on first use; exits 3
# with one sentence when there are none.
k8s_binaries() {
  local need=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [ "$with_kubelet" = 1 ] && need+=(kubelet containerd containerd-shim-runc-v2 ctr)
  local bin
  if [ -n "${MGPU_K8S_BIN:-}" ]; then
    bin=$MGPU_K8S_BIN
  else
    local archives=${MGPU_SHARED_DIR:-$repo/../shared}/k8s
    if [ ! -f "$archives/SHA256SUMS" ]; then
      echo "cluster.sh: no Kubernetes binaries: set MGPU_K8S_BIN or put the archives of shared/k8s/ at $archives." >&2
      exit 3
    fi
    local cache=${MGPU_K8S_CACHE:-$HOME/.cache/mgpu-k8s}
    local key
    key=$(sha256sum "$archives/SHA256SUMS" | cut -c1-16)
    bin=$cache/$key/bin
    if [ ! -f "$cache/$key/complete" ]; then
      (cd "$archives" && sha256sum --quiet -c SHA256SUMS) >&2 ||
        die "the archives in $archives do not match their SHA256SUMS."
      mkdir -p "$cache"
      local tmp
      tmp=$(mktemp -d "$cache/unpack.XXXXXX")
      local archive
      for archive in $(awk '{print $2}' "$archives/SHA256SUMS"); do
        tar -xJf "$archives/$archive" -C "$tmp"
      done
      mkdir -p "$tmp/out/bin"
      find "$tmp" -path "$tmp/out" -prune -o -type f -path '*/bin/*' -exec mv {} "$tmp/out/bin/" \;
      touch "$tmp/out/complete"
      rm -rf "${cache:?}/$key"
      mv "$tmp/out" "$cache/$key"
      rm -rf "$tmp"
    fi
  fi
  local b
  for b in "${need[@]}"; do
    if [ ! -x "$bin/$b" ]; then
      echo "cluster.sh: no Kubernetes binaries: $bin has no $b." >&2
      exit 3
    fi
  done
  echo "$bin"
}

pid_of() { cat "$state/pids/$1" 2>/dev/null || true; }
running() {
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Starts a component in its own session with its log in logs/NAME.log; remembers its pid.
start() {  # name, command...
  local name=$1
  shift
  mkdir -p "$state/pids" "$state/logs" "$state/commands"
  printf '%q ' "$@" >"$state/commands/$name"
  setsid "$@" >>"$state/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$state/pids/$name"
}

# Kills a component with `signal` and starts it again with the command it was started with; waits until it
# answers again.
restart() {
  [ -n "$target" ] && [ -f "$state/commands/$target" ] ||
    die "restart needs the name of a component of the cluster in $state (one of: $(ls "$state/commands" 2>/dev/null | tr '\n' ' '))."
  bin=$(grep -s '^export MGPU_K8S_BIN=' "$state/env" | cut -d= -f2-)
  local pid
  pid=$(pid_of "$target")
  if [ "$command" != resume ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -"$signal" "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  [ "$command" != pause ] || return 0
  echo "=== restarted by cluster.sh restart ($signal) ===" >>"$state/logs/$target.log"
  local command
  command=$(cat "$state/commands/$target")
  eval "start $target $command"
  case "$target" in
    etcd) wait_for "etcd is up" 30 curl -sf "http://127.0.0.1:$etcd_port/health" ;;
    kube-apiserver) wait_for "kube-apiserver is ready" 60 kctl get --raw /readyz ;;
    containerd) wait_for "containerd is up" 30 "$bin/ctr" --address "$state/containerd/containerd.sock" version ;;
    kubelet) wait_for "the kubelet is healthy" 60 curl -sf "http://127.0.0.1:$kubelet_healthz_port/healthz" ;;
    *) true ;;
  esac || die "$target did not come back after the restart; its last lines: $(tail -n 20 "$state/logs/$target.log")"
}

# Stops a component by its pid: SIGTERM, then SIGKILL after `grace` seconds.
stop() {  # name [grace]
  local name=$1 grace=${2:-10} pid
  pid=$(pid_of "$name")
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ $waited -lt $((grace * 10)) ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "cluster.sh: $name did not stop within ${grace} s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
  fi
  rm -f "$state/pids/$name"
  echo "cluster.sh: $name stopped" >&2
}

wait_for() {  # what, seconds, command...
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
  echo "cluster.sh: $what ($((seconds - deadline + SECONDS)) s)" >&2
}

https_ok() { curl -sk --max-time 2 -o /dev/null -w '%{http_code}' "$1" | grep -q '^200$'; }

kctl() { "$bin/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }

make_pki() {
  local pki=$state/pki
  mkdir -p "$pki"
  (
    umask 077
    cd "$pki"
    key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; }
    key ca
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=mgpu-test-cluster-ca" -out ca.crt
    cert() {  # name, subject, extendedKeyUsage, [subjectAltName]
      key "$1"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -z "${4:-}" ] || echo "subjectAltName=$4"
      } >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,IP:${service_range%.0/24}.1,IP:$node_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=mgpu-test-admin" clientAuth
    cert controller-manager "/CN=system:kube-controller-manager" clientAuth
    cert scheduler "/CN=system:kube-scheduler" clientAuth
    cert kubelet "/O=system:nodes/CN=system:node:localhost" clientAuth
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl
  )
  # The extender's serving certificate and the webhook's caBundle, as an operator makes them.
  bash "$repo/scripts/certs.sh" --out "$state/extender-tls" >/dev/null
}

write_kubeconfig() {  # file, client certificate name
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: mgpu-test
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $state/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $state/pki/$2.crt
    client-key: $state/pki/$2.key
contexts:
- name: mgpu-test
  context: {cluster: mgpu-test, user: $2}
current-context: mgpu-test
EOF
}

# deploy/extender/scheduler-config.yaml as shipped (or --scheduler-config), with only what names this machine
# replaced: the scheduler's kubeconfig, the extender's address (the node's address, where its hostNetwork pod
# listens; or loopback for an extender run on the host beside an API-only cluster) and the CA file of certs.sh.
write_scheduler_config() {
  local extender_host=127.0.0.1
  [ "$with_kubelet" = 1 ] && extender_host=$node_ip
  [ -f "$scheduler_config" ] || die "the scheduler configuration $scheduler_config does not exist."
  sed -e "s|kubeconfig: /etc/kubernetes/scheduler.conf|kubeconfig: $state/scheduler.kubeconfig|" \
    -e "s|urlPrefix: https://mgpu-scheduler-extender.mgpu-system.svc:12345|urlPrefix: https://$extender_host:$extender_port|" \
    -e "s|caFile: /etc/kubernetes/mgpu/ca.crt|caFile: $state/extender-tls/ca.crt|" \
    "$scheduler_config" >"$state/scheduler-config.yaml"
  grep -q "urlPrefix: https://$extender_host:$extender_port" "$state/scheduler-config.yaml" ||
    die "$scheduler_config no longer has the urlPrefix this script replaces."
  printf 'leaderElection:\n  leaderElect: false\n' >>"$state/scheduler-config.yaml"
  if [ -n "$scheduler_qps" ]; then
    sed -i "s|^clientConnection:|clientConnection:\n  qps: $scheduler_qps\n  burst: $scheduler_qps|" "$state/scheduler-config.yaml"
  fi
}

write_node_configs() {
  mkdir -p "$state/containerd" "$state/cdi" "$state/cni/net.d" "$state/kubelet"
  cat >"$state/containerd/config.toml" <<EOF
version = 3
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$state/containerd/containerd.sock"
[ttrpc]
  address = "$state/containerd/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'localhost/pause:mgpu'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ['$state/cdi']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = '$state/runc'
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '$state/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
EOF
  cat >"$state/cni/net.d/10-mgpu.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "mgpu-test",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": "$state/cni/ipam",
              "ranges": [[{"subnet": "$pod_subnet", "rangeStart": "${pod_subnet%.0/24}.10",
                           "rangeEnd": "${pod_subnet%.0/24}.250"}]]}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}, x509: {clientCAFile: $state/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://$state/containerd/containerd.sock
imageServiceEndpoint: unix://$state/containerd/containerd.sock
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
maxPods: 50
podLogsDirectory: $state/kubelet/pod-logs
serializeImagePulls: false
EOF
}

# The pause and busybox images the node needs before any pod: scripts/test-images.sh, imported into
# containerd's k8s.io namespace with its own ctr.
import_base_images() {
  local images
  images=$(bash "$repo/scripts/test-images.sh" base)
  local tar
  for tar in $images; do
    "$bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io images import "$tar" >/dev/null \
      2>"$state/logs/ctr-import.log" || die "ctr could not import $tar: $(tail -3 "$state/logs/ctr-import.log")"
  done
}

up() {
  [ ! -f "$state/pids/kube-apiserver" ] || ! running kube-apiserver ||
    die "a cluster already runs from $state (scripts/cluster.sh down --state-dir $state first)."
  bin=$(k8s_binaries)
  for tool in etcd openssl curl; do
    command -v $tool >/dev/null || die "$tool is not installed (bash scripts/setup.sh installs it)."
  done
  if [ "$with_kubelet" = 1 ]; then
    for tool in runc ip busybox; do
      command -v $tool >/dev/null || die "$tool is not installed (bash scripts/setup.sh installs it)."
    done
    [ -x /usr/lib/cni/bridge ] || die "the CNI plugins are not installed (bash scripts/setup.sh installs containernetworking-plugins)."
    [ -f "$inventory" ] || die "the inventory $inventory does not exist."
    # The lock is held by a process of its own, so that restarting the kubelet or containerd keeps it.
    exec 9>>"$kubelet_lock"
    if ! flock -n 9; then
      die "another cluster's kubelet runs on this machine ($(cat "$kubelet_lock" 2>/dev/null || echo "see $kubelet_lock")); bring it down first: only one kubelet can run here."
    fi
    echo "$state" >"$kubelet_lock"
    mkdir -p "$state/pids" "$state/logs"
    setsid sleep infinity </dev/null >/dev/null 2>&1 &
    echo $! >"$state/pids/kubelet-lock"
    exec 9>&-
  fi
  rm -rf "$state/pki" "$state/etcd" "$state/kubelet" "$state/containerd" "$state/cni" "$state/runc"
  mkdir -p "$state/logs"
  : >"$state/logs/cluster.log"
  make_pki
  write_kubeconfig "$state/kubeconfig" admin
  write_kubeconfig "$state/controller-manager.kubeconfig" controller-manager
  write_kubeconfig "$state/scheduler.kubeconfig" scheduler
  write_kubeconfig "$state/kubelet.kubeconfig" kubelet
  write_scheduler_config
  cat >"$state/env" <<EOF
export KUBECONFIG=$state/kubeconfig
export MGPU_K8S_BIN=$bin
export MGPU_CLUSTER_DIR=$state
export MGPU_CLUSTER_PORT_BASE=$port_base
export MGPU_CLUSTER_KUBELET=$with_kubelet
export MGPU_CLUSTER_NODE_IP=$([ "$with_kubelet" = 1 ] && echo $node_ip || echo 127.0.0.1)
export MGPU_CLUSTER_APISERVER=https://127.0.0.1:$apiserver_port
export MGPU_CLUSTER_EXTENDER_PORT=$extender_port
export MGPU_CLUSTER_PLUGIN_METRICS_PORT=$plugin_metrics_port
export MGPU_CLUSTER_INVENTORY=$inventory
EOF

  start etcd etcd --name mgpu-test --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "mgpu-test=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state new
  wait_for "etcd is up" 30 curl -sf "http://127.0.0.1:$etcd_port/health" || fail_up etcd

  local pki=$state/pki
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range "$service_range" \
    --kubelet-preferred-address-types Hostname --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --enable-aggregator-routing=true --endpoint-reconciler-type none --allow-privileged=true \
    --profiling=$profiling
  wait_for "kube-apiserver is ready" 60 kctl get --raw /readyz || fail_up kube-apiserver

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$controller_manager_port" --leader-elect=false \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true --profiling=$profiling "${node_grace_flags[@]}" \
    "${controller_qps_flags[@]}"
  start kube-scheduler "$bin/kube-scheduler" --config "$state/scheduler-config.yaml" \
    --authentication-kubeconfig "$state/scheduler.kubeconfig" \
    --authorization-kubeconfig "$state/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$scheduler_port" --profiling=$profiling
  wait_for "kube-controller-manager is healthy" 60 https_ok "https://127.0.0.1:$controller_manager_port/healthz" ||
    fail_up kube-controller-manager
  wait_for "kube-scheduler is healthy" 60 https_ok "https://127.0.0.1:$scheduler_port/healthz" ||
    fail_up kube-scheduler
  # A pod that mounts a token is refused until the controller manager has made its namespace's service account.
  wait_for "the default service account exists" 60 kctl get serviceaccount default --namespace default ||
    fail_up kube-controller-manager

  if [ "$with_kubelet" = 1 ]; then
    ls /run/netns 2>/dev/null | sort >"$state/netns-before" || true
    ip link show "$bridge" >/dev/null 2>&1 && ip link delete "$bridge"
    ip link add "$bridge" type bridge || die "could not create the bridge $bridge (ip link add)."
    ip addr add "$node_ip/24" dev "$bridge"
    ip link set "$bridge" up
    write_node_configs
    start containerd env PATH="$bin:$PATH" "$bin/containerd" --config "$state/containerd/config.toml"
    wait_for "containerd is up" 30 "$bin/ctr" --address "$state/containerd/containerd.sock" version ||
      fail_up containerd
    import_base_images
    start kubelet env PATH="$bin:$PATH" "$bin/kubelet" --config "$state/kubelet/config.yaml" \
      --kubeconfig "$state/kubelet.kubeconfig" --root-dir "$state/kubelet" \
      --cert-dir "$state/kubelet/pki" --hostname-override localhost --node-ip "$node_ip" \
      --node-labels mgpu.io/gpu-node=true
    wait_for "node localhost is Ready" 90 kctl wait --for=condition=Ready node/localhost --timeout=2s ||
      fail_up kubelet
  fi
  local nodes_flags=(--nodes "$api_nodes" --cards "$api_node_cards")
  if [ -n "$api_node_list" ]; then
    [ -f "$api_node_list" ] || die "the node list $api_node_list does not exist."
    api_nodes=$(($(grep -c . "$api_node_list") - 1))
    nodes_flags=(--node-list "$(cd "$(dirname "$api_node_list")" && pwd)/$(basename "$api_node_list")")
  fi
  if [ -n "$api_node_config" ]; then
    [ -f "$api_node_config" ] || die "the API-only nodes' config $api_node_config does not exist."
    nodes_flags+=(--config "$(cd "$(dirname "$api_node_config")" && pwd)/$(basename "$api_node_config")")
  fi
  if [ "$api_nodes" -gt 0 ]; then
    local tool=${MGPU_BUILD_DIR:-$repo/build}/src/tools/mgpu-api-nodes
    [ -x "$tool" ] || die "$tool is not built (bash scripts/setup.sh mgpu-api-nodes)."
    start api-nodes "$tool" --kubeconfig "$state/kubeconfig" "${nodes_flags[@]}" \
      --confirm-after-ms "$confirm_after_ms"
    # 300 s and half a second a node: 1,000 nodes took over five minutes on the shared 2-core machine.
    wait_for "$api_nodes API-only nodes are Ready" $((300 + api_nodes / 2)) api_nodes_ready || fail_up api-nodes
  fi
  echo "cluster.sh: up; source $state/env (KUBECONFIG=$state/kubeconfig)" >&2
}

api_nodes_ready() {
  [ "$(kctl get nodes -l mgpu.io/api-only=true --no-headers 2>/dev/null | grep -c ' Ready ')" = "$api_nodes" ]
}

fail_up() {
  echo "cluster.sh: $1 did not come up; its last lines:" >&2
  tail -n 30 "$state/logs/$1.log" >&2 || true
  echo "cluster.sh: bringing the cluster down again" >&2
  down
  exit 1
}

# Removes every pod through the kubelet (so it tears down their containers, mounts and network), then
# stops the node; whatever is left (a kubelet that was not running) is killed by runc and unmounted.
stop_node() {
  if running kubelet && running kube-apiserver; then
    kctl delete pods --all-namespaces --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 30))
    while [ $SECONDS -lt $deadline ] &&
      [ -n "$("$bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null)" ]; do
      sleep 0.5
    done
  fi
  stop kubelet 20
  if [ -d "$state/runc/k8s.io" ]; then
    local id
    for id in $(runc --root "$state/runc/k8s.io" list -q 2>/dev/null); do
      runc --root "$state/runc/k8s.io" kill "$id" KILL >/dev/null 2>&1 || true
      runc --root "$state/runc/k8s.io" delete --force "$id" >/dev/null 2>&1 || true
    done
  fi
  # The shims of this containerd (they outlive it by design), found by its socket in their command line.
  local proc pid
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    if { tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null | grep -q "containerd-shim-runc-v2 .*-address $state/containerd/containerd.sock"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  stop containerd 20
  # Network namespaces the pods left (those not there at `up`).
  if [ -f "$state/netns-before" ]; then
    local ns
    for ns in $(ls /run/netns 2>/dev/null | sort | comm -13 "$state/netns-before" -); do
      case "$ns" in cni-*) umount "/run/netns/$ns" 2>/dev/null || true; rm -f "/run/netns/$ns" ;; esac
    done
  fi
  ip link show "$bridge" >/dev/null 2>&1 && ip link delete "$bridge"
  rm -rf /var/lib/cni/results/mgpu-test-* 2>/dev/null || true
  # The kubelet's sockets and device checkpoint in the folder that does not move with --root-dir: the next
  # cluster's kubelet must not read this one's allocations.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/mgpu*.sock \
    /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint 2>/dev/null || true
}

# Every mount under the state folder, deepest first.
unmount_all() {
  local m
  for m in $(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "cluster.sh: could not unmount $m" >&2
  done
}

down() {
  bin=${MGPU_K8S_BIN:-}
  [ -n "$bin" ] || bin=$(grep -s '^export MGPU_K8S_BIN=' "$state/env" | cut -d= -f2- || true)
  stop api-nodes
  stop kube-scheduler
  stop kube-controller-manager
  if [ -f "$state/pids/kubelet" ] || [ -f "$state/pids/containerd" ] || [ -f "$state/pids/kubelet-lock" ]; then
    stop_node
  fi
  unmount_all
  # The API server first: etcd stopped under it makes it hang.
  stop kube-apiserver 20
  stop etcd
  if [ -f "$state/pids/kubelet-lock" ]; then
    [ "$(cat "$kubelet_lock" 2>/dev/null)" != "$state" ] || : >"$kubelet_lock"
    stop kubelet-lock
  fi
  local left
  left=$(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo)
  [ -z "$left" ] || die "still mounted after down: $left"
  echo "cluster.sh: down (logs kept in $state/logs)" >&2
}

status() {
  local rc=0 name
  local names=(etcd kube-apiserver kube-controller-manager kube-scheduler)
  [ -f "$state/pids/kubelet" ] && names+=(containerd kubelet)
  [ -f "$state/pids/api-nodes" ] && names+=(api-nodes)
  for name in "${names[@]}"; do
    if running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(pid_of "$name")"
    else
      printf '%-24s not running\n' "$name"
      rc=1
    fi
  done
  [ ! -f "$state/env" ] || echo "source $state/env"
  return $rc
}

logs() {
  local f
  for f in "$state"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "==== $(basename "$f" .log): last $lines lines"
    tail -n "$lines" "$f"
  done
}

case "$command" in
  up) up ;;
  down) down ;;
  status) status ;;
  logs) logs ;;
  restart) restart ;;
  pause) signal=TERM; restart ;;
  resume) restart ;;
  deploy) exec bash "$repo/scripts/cluster-deploy.sh" "$state" ;;
  binaries) k8s_binaries ;;
  *) die "usage: scripts/cluster.sh up|deploy|status|logs|restart|pause|resume|down|binaries [options] (see the top of the script)" ;;
esac
