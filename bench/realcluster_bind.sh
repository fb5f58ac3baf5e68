#!/usr/bin/env bash
# Bind throughput through the real kube-scheduler (v1.36.2, ../shared/k8s/) and the real API server (issue 28
# part 4; bench/RESULTS.md section 5): scripts/cluster.sh without a kubelet, 1,000 API-only nodes (8 x 80 GiB,
# 2 x 24 GiB and 4 x 16 GiB cards in turn, mgpu-api-nodes), mgpu-scheduler-extender run on the host with
# deploy/'s scheduler configuration calling it, and mgpu-api-nodes standing in for the nodes' device plugins:
# --delay-ms after each bind it writes the pod's gpu-allocated. kube-scheduler is paused while the pods are
# created (mgpu pods of 20 percent core and 4 GiB, and as many plain pods of 100m CPU), then resumed; the run
# ends when every pod is bound. Prints pods/s of each kind (from their PodScheduled times, one second
# resolution), the extender's bind latency (its histogram), its CPU per mgpu pod, and checks that no card is
# over-committed (the extender's /v1/nodes). A benchmark, not a test: run it on a quiet machine, under nice.
#   bench/realcluster_bind.sh [--qps default|N] [--nodes 1000] [--pods 2000] [--plain 2000] [--delay-ms 1000]
#                             [--state-dir DIR] [--port-base N]
# Needs the build's mgpu-scheduler-extender and mgpu-api-nodes (bash scripts/setup.sh mgpu-scheduler-extender
# mgpu-api-nodes), curl, jq and bc.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
qps=default nodes=1000 pods=2000 plain=2000 delay_ms=1000
state=/tmp/mgpu-bench-cluster port_base=36500
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) qps=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --plain) plain=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    *) echo "realcluster_bind.sh: unknown argument $1 (see the top of the script)" >&2; exit 2 ;;
  esac
done
cluster() { bash "$repo/scripts/cluster.sh" "$1" --state-dir "$state" --port-base "$port_base" "${@:2}"; }
qps_flag=()
[ "$qps" = default ] || qps_flag=(--scheduler-qps "$qps")
trap 'kill $extender_pid 2>/dev/null || true; cluster down >/dev/null 2>&1 || true' EXIT
extender_pid=""
cluster up --no-kubelet --api-nodes "$nodes" --api-node-cards 8x81920,2x24576,4x16384 \
  --confirm-after-ms "$delay_ms" "${qps_flag[@]}" >&2
# shellcheck source=/dev/null
source "$state/env"
kubectl() { "$MGPU_K8S_BIN/kubectl" "$@"; }

cat >"$state/extender.yaml" <<EOF
extender:
  listenAddress: 127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT
  tlsCertFile: $state/extender-tls/tls.crt
  tlsKeyFile: $state/extender-tls/tls.key
EOF
"$build/src/extender/mgpu-scheduler-extender" --kubeconfig "$state/kubeconfig" --config "$state/extender.yaml" \
  >"$state/logs/extender.log" 2>&1 &
extender_pid=$!
until curl -sk --max-time 1 "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/readyz" >/dev/null; do sleep 0.2; done

cluster pause kube-scheduler >&2
{
  echo '{"apiVersion":"v1","kind":"List","items":['
  for ((i = 0; i < pods + plain; i++)); do
    if [ $i -lt "$pods" ]; then
      limits='"limits":{"mgpu.io/mgpu-core":"20","mgpu.io/mgpu-memory":"4096"},'
      name=gpu-$i
    else
      limits=''
      name=plain-$i
    fi
    [ $i = 0 ] || echo ,
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","namespace":"default"},' "$name"
    printf '"spec":{"containers":[{"name":"main","image":"registry.example/infer:1","resources":{%s"requests":{"cpu":"100m","memory":"1Gi"}}}]}}' "$limits"
  done
  echo ']}'
} >"$state/pods.json"
kubectl create -f "$state/pods.json" >/dev/null
ticks() { awk '{print $14 + $15}' "/proc/$extender_pid/stat"; }
cpu_before=$(ticks)
start=$(date +%s.%N)
cluster resume kube-scheduler >&2
total=$((pods + plain))
while :; do
  bound=$(kubectl get pods -n default -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)
  [ "$bound" -lt "$total" ] || break
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  if [ "$(echo "$elapsed > 900" | bc)" = 1 ]; then
    echo "realcluster_bind.sh: only $bound of $total pods bound after 900 s" >&2
    break
  fi
  sleep 1
done
wall=$(echo "$(date +%s.%N) - $start" | bc)
cpu_after=$(ticks)
# Pods/s of each kind from their PodScheduled times (1 s resolution): pods / (last - first + 1 s).
rate() {
  kubectl get pods -n default -o json |
    jq -r --arg p "$1" '[.items[] | select(.metadata.name | startswith($p)) | .status.conditions[]? |
      select(.type == "PodScheduled" and .status == "True") | .lastTransitionTime | fromdate] |
      if length == 0 then "0 pods" else "\(length) pods, \(length / (max - min + 1) * 10 | round / 10) pods/s" end'
}
metrics=$(curl -sk "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/metrics")
bind_sum=$(echo "$metrics" | awk '/^mgpu_extender_request_duration_seconds_sum\{verb="bind"\}/{print $2}')
bind_count=$(echo "$metrics" | awk '/^mgpu_extender_request_duration_seconds_count\{verb="bind"\}/{print $2}')
clk=$(getconf CLK_TCK)
echo "real kube-scheduler $(kubectl version -o json | jq -r .serverVersion.gitVersion), client QPS $qps, $nodes nodes, confirmation ${delay_ms} ms"
echo "  all $total pods bound in $wall s"
echo "  mgpu pods:  $(rate gpu-)"
echo "  plain pods: $(rate plain-)"
echo "  extender bind: $bind_count calls, mean $(echo "scale=2; 1000 * $bind_sum / $bind_count" | bc) ms"
echo "  extender CPU: $(echo "scale=3; 1000 * ($cpu_after - $cpu_before) / $clk / $pods" | bc) ms per mgpu pod"
echo "  binds answered with an error: $(echo "$metrics" | awk '/^mgpu_extender_requests_total\{verb="bind",code="(4|5)/{s += $2} END {print s + 0}')"
# The extender's own view of every card (what kubectl mgpu nodes -o json shows), once every pod is confirmed.
sleep $((delay_ms / 1000 + 2))
over=$(curl -sk "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/v1/nodes" |
  jq '[.nodes[].cards[] | select(.core > 100 or .reclaimedCore > 100 or .memoryMiB > .capacityMiB)] | length')
echo "  over-committed cards: $over"
