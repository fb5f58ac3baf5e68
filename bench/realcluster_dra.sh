#!/usr/bin/env bash
# DRA pods per second and cards used through the real kube-scheduler (v1.36.2, ../shared/k8s/) and the real API
# server, beside the device-plugin path (the extender) and beside plain pods, in one run on one cluster (issue
# 29; bench/RESULTS.md section 8): scripts/cluster.sh without a kubelet, 1,000 API-only nodes (8 x 80 GiB,
# 2 x 24 GiB and 4 x 16 GiB cards in turn, mgpu-api-nodes, confirming the extender's binds --delay-ms later),
# their DRA ResourceSlices as mgpu's node daemon publishes them (mgpu-dra-slices, with dra.cards set to
# --cards: the default `fixed` is one device per card; `any` is the six-device layout with shared counters, whose
# scheduling cost grows with the square of the nodes: at 1,000 nodes it does not finish; docs/dra.md §2),
# deploy/dra/'s DeviceClasses,
# and mgpu-scheduler-extender on the host where deploy/'s scheduler configuration calls it. Three phases, each
# with kube-scheduler paused while its pods are created, then resumed until every pod is bound:
#   plain  --pods pods of 100m CPU
#   mgpu   --pods pods asking mgpu-core 20 and mgpu-memory 4096 (the extender places them)
#   dra    --pods pods holding one claim of 20 cores and 4 GiB (class mgpu.io; kube-scheduler's allocator
#          takes the card), written as /mutate leaves them (one mgpu.io/dra-gpu and mgpu.io/dra-limits), so
#          that the extender chooses the node (docs/dra.md §7); with --dra-scores off, without those: the node
#          is kube-scheduler's own choice
# The mgpu pods are deleted before the dra phase (their cards counted first), so that the extender's view of
# the cards holds only what the allocator also sees.
# Prints pods/s of each phase (from the pods' PodScheduled times, one second resolution), the cards the mgpu
# and the DRA pods hold, and checks that no card is over its capacity (the extender's /v1/nodes; the claims'
# consumed capacity summed per card, against the slices' capacities; exits 1 when any card is over). A
# benchmark, not a test: run it on a quiet machine, under nice.
#   bench/realcluster_dra.sh [--qps default|N] [--nodes 1000] [--pods 2000] [--delay-ms 1000]
#                            [--cards fixed|any|VARIANT] [--dra-scores on|off] [--state-dir DIR] [--port-base N]
# Needs the build's mgpu-scheduler-extender, mgpu-api-nodes and mgpu-dra-slices, curl, jq and bc.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
qps=1000 nodes=1000 pods=2000 delay_ms=1000 cards=fixed dra_scores=on
state=/tmp/mgpu-bench-dra port_base=27040
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) qps=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --cards) cards=$2; shift 2 ;;
    --dra-scores) dra_scores=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    *) echo "realcluster_dra.sh: unknown argument $1 (see the top of the script)" >&2; exit 2 ;;
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
printf 'dra:\n  cards: %s\n' "$cards" >"$state/dra-config.yaml"
"$build/src/tools/mgpu-dra-slices" --kubeconfig "$state/kubeconfig" --config "$state/dra-config.yaml" >&2
kubectl apply -f "$repo/deploy/dra/deviceclasses.yaml" >/dev/null

printf 'extender:\n  listenAddress: 127.0.0.1:%s\n  tlsCertFile: %s\n  tlsKeyFile: %s\n' \
  "$MGPU_CLUSTER_EXTENDER_PORT" "$state/extender-tls/tls.crt" "$state/extender-tls/tls.key" >"$state/extender.yaml"
"$build/src/extender/mgpu-scheduler-extender" --kubeconfig "$state/kubeconfig" --config "$state/extender.yaml" \
  >"$state/logs/extender.log" 2>&1 &
extender_pid=$!
for ((i = 0; i < 300; i++)); do
  curl -sk --max-time 1 "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/readyz" >/dev/null && break
  sleep 0.2
done
kubectl create -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: c20-m4g, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: mgpu.io
          capacity: {requests: {cores: "20", memory: 4Gi}}
YAML

# phase KIND: creates its pods with the scheduler paused, resumes it, waits until all are bound.
phase() {
  local kind=$1 i spec start bound
  cluster pause kube-scheduler >&2
  {
    echo '{"apiVersion":"v1","kind":"List","items":['
    for ((i = 0; i < pods; i++)); do
      case "$kind" in
        plain) spec='"containers":[{"name":"main","image":"x","resources":{"requests":{"cpu":"100m","memory":"1Gi"}}}]' ;;
        mgpu) spec='"containers":[{"name":"main","image":"x","resources":{"limits":{"mgpu.io/mgpu-core":"20","mgpu.io/mgpu-memory":"4096"},"requests":{"cpu":"100m","memory":"1Gi"}}}]' ;;
        dra) spec='"resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"c20-m4g"}],"containers":[{"name":"main","image":"x","resources":{"claims":[{"name":"gpu"}],"requests":{"cpu":"100m","memory":"1Gi"}'"$dra_limits"'}}]' ;;
      esac
      [ "$i" = 0 ] || echo ,
      printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s-%d","namespace":"default","labels":{"phase":"%s"}%s},"spec":{%s}}' \
        "$kind" "$i" "$kind" "$([ "$kind" = dra ] && echo "$dra_annotations")" "$spec"
    done
    echo ']}'
  } >"$state/pods-$kind.json"
  kubectl create -f "$state/pods-$kind.json" >/dev/null
  start=$(date +%s.%N)
  cluster resume kube-scheduler >&2
  while :; do
    bound=$(kubectl get pods -n default -o json |
      jq --arg p "$kind-" '[.items[] | select(.metadata.name | startswith($p)) | select(.spec.nodeName)] | length')
    [ "$bound" -lt "$pods" ] || break
    if [ "$(echo "$(date +%s.%N) - $start > 1200" | bc)" = 1 ]; then
      echo "realcluster_dra.sh: only $bound of $pods $kind pods bound after 1200 s" >&2
      break
    fi
    sleep 1
  done
  echo "  $kind pods: $(kubectl get pods -n default -o json |
    jq -r --arg p "$kind-" '[.items[] | select(.metadata.name | startswith($p)) | .status.conditions[]? |
      select(.type == "PodScheduled" and .status == "True") | .lastTransitionTime | fromdate] |
      if length == 0 then "0 bound" else "\(length) bound, \(length / (max - min + 1) * 10 | round / 10) pods/s" end'), wall $(echo "$(date +%s.%N) - $start" | bc | cut -c1-6) s"
}

# The extender's cards in use, and those over capacity.
extender_cards() {
  curl -sk "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/v1/nodes" | jq -r '[.nodes[].cards[]] |
    "\(map(select(.core > 0 or .memoryMiB > 0)) | length) \(map(select(.core > 100 or .reclaimedCore > 100 or .memoryMiB > .capacityMiB)) | length)"'
}
dra_limits="" dra_annotations=""
if [ "$dra_scores" = on ]; then
  dra_limits=',"limits":{"mgpu.io/dra-gpu":"1"}'
  dra_annotations=',"annotations":{"mgpu.io/dra-limits":"{\"main\":{\"mgpu.io/mgpu-core\":\"20\",\"mgpu.io/mgpu-memory\":\"4096\"}}"}'
fi

echo "real kube-scheduler $(kubectl version -o json | jq -r .serverVersion.gitVersion), client QPS $qps, $nodes nodes, $pods pods a phase, dra.cards $cards, DRA pods scored by the extender: $dra_scores"
phase plain
phase mgpu
sleep $((delay_ms / 1000 + 2))
read -r used over < <(extender_cards)
echo "  mgpu pods' cards (the extender's view): $used used, $over over capacity"
kubectl delete pods -n default -l phase=mgpu --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
for ((i = 0; i < 300; i++)); do
  read -r used over < <(extender_cards)
  [ "$used" != 0 ] || break
  sleep 1
done
phase dra
# Every claim's consumed capacity summed per card, against the card's capacity as its slice publishes it.
mib='def mib: if endswith("Gi") then (.[:-2] | tonumber * 1024) elif endswith("Mi") then (.[:-2] | tonumber)
  else (tonumber / 1048576) end;'
kubectl get resourceslices -o json | jq "$mib"'
  [.items[] | .spec.pool.name as $pool | .spec.devices[]? | select(.capacity.memory) |
   {key: ($pool + "/" + (.name | capture("^gpu-(?<i>[0-9]+)-").i)), value: (.capacity.memory.value | mib)}] |
  from_entries' >"$state/capacity.json"
read -r used over < <(kubectl get resourceclaims -n default -o json | jq -r --slurpfile capacity "$state/capacity.json" "$mib"'
  [.items[] | .status.allocation.devices.results[]? | select(.driver == "mgpu.io") |
   {card: (.pool + "/" + (.device | capture("^gpu-(?<i>[0-9]+)-").i)),
    cores: (.consumedCapacity.cores // "0" | tonumber), memory: (.consumedCapacity.memory // "0" | mib)}] |
  group_by(.card) | map({card: .[0].card, cores: (map(.cores) | add), memory: (map(.memory) | add)}) |
  "\(length) \(map(select(.cores > 100 or .memory > $capacity[0][.card])) | length)"')
echo "  dra pods' cards (their claims): $used used, $over over capacity (cores or memory)"
read -r _ mgpu_over < <(extender_cards)
[ "$over" = 0 ] && [ "$mgpu_over" = 0 ] || { echo "realcluster_dra.sh: cards over capacity" >&2; exit 1; }
