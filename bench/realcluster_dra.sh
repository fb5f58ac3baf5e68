#!/usr/bin/env bash
# DRA pods per second and cards used through the real kube-scheduler (v1.36.2, ../shared/k8s/) and the real API
# server, beside the device-plugin path (the extender) and beside plain pods, in one run on one cluster (issues
# 29 and 42; bench/RESULTS.md section 8): scripts/cluster.sh without a kubelet, 1,000 API-only nodes (8 x 80 GiB,
# 2 x 24 GiB and 4 x 16 GiB cards in turn, mgpu-api-nodes, confirming the extender's binds --delay-ms later),
# deploy/dra/'s DeviceClasses and pod webhooks (the extender's /mutate-claims, at 127.0.0.1), and
# mgpu-scheduler-extender on the host where deploy/'s scheduler configuration calls it; kube-scheduler's and
# kube-controller-manager's client QPS --qps. Phases, each with kube-scheduler paused while its pods are
# created (and, for DRA pods, until kube-controller-manager has made every pod's claim from its template),
# then resumed until every pod is bound:
#   plain  --pods pods of 100m CPU
#   mgpu   --pods pods asking mgpu-core 20 and mgpu-memory 4096 (the extender places them); --mgpu off: none
#   then one DRA phase per word of --dra, in order, each of --pods pods holding one claim of 20 cores and 4 GiB
#   (kube-scheduler's allocator takes the card), after the previous phase's pods and claims are gone:
#     LAYOUT    the nodes' slices as mgpu's node daemon publishes them (mgpu-dra-slices) with dra.cards LAYOUT
#               (fixed, the default; another variant; any: six devices per card sharing a counter), claims of
#               class mgpu.io
#     bare      one device per card with `cores` and `memory` only (the fixed slices, attributes and
#               reclaimedCores taken out), claims of a class selecting by driver alone (bare.mgpu.io): what
#               any driver without mgpu's rules costs the scheduler
#     any@N     the six-device layout on N nodes only (labelled bench.mgpu.io/six-N), --small-pods pods held
#               there by a nodeSelector, at most --small-timeout seconds: the six-device layout in an N-node
#               cluster, as far as the scheduler's cost goes (the other nodes fail its node affinity first)
#     profile   the fixed layout's pods in the shipped configuration's DRA profile (spec.schedulerName
#               mgpu-dra, as the webhooks set it: dra.schedulerName), which samples 15 percent of the nodes
#     all-nodes the fixed layout's pods in a profile added for the benchmark that samples every node
#               (percentageOfNodesToScore 100): the extender's node choice over all nodes (issue 42 point 2)
#     pct@N     the same in a profile added for the benchmark with percentageOfNodesToScore N
#     byhand    claims written by hand: pods naming the class mgpu.io template, with no mgpu limits and no
#               annotation, on the layout the previous phase published; the webhook's /mutate-claims gives
#               them what /mutate gives its pods (docs/dra.md §7), so that the extender chooses the node
#     whole     one whole card a pod, written as /mutate leaves a dedicated_cores pod (a claim of class
#               whole.mgpu.io), in the DRA profile, on the fixed layout
#     extres    one whole card a pod through the extended resource (limits mgpu.io/gpu: 1, no claim:
#               kube-scheduler makes it), on the fixed layout; /mutate-claims gives them mgpu.io/dra-limits and
#               the DRA profile, and kube-scheduler calls the extender for mgpu.io/gpu (issue 42 point 4)
#   The other DRA phases' pods are written as /mutate leaves them (one mgpu.io/dra-gpu and mgpu.io/dra-limits),
#   so that the extender chooses the node (docs/dra.md §7); with --dra-scores off, without those: the node is
#   kube-scheduler's own choice.
# The mgpu pods are deleted before the DRA phases (their cards counted first), so that the extender's view of
# the cards holds only what the allocator also sees.
# Prints pods/s of each phase (from the pods' PodScheduled times, one second resolution), kube-scheduler's CPU
# over the phase (utime + stime from /proc of the process cluster.sh resume starts, its start-up included), the cards the mgpu and each DRA phase's pods hold, and checks
# that no card is over its capacity (the extender's /v1/nodes; the claims' consumed capacity summed per card,
# against the slices' capacities; exits 1 when any card is over). A benchmark, not a test: run it on a quiet
# machine, under nice.
#   bench/realcluster_dra.sh [--qps default|N] [--nodes 1000] [--pods 2000] [--delay-ms 1000]
#                            [--dra "fixed"] [--mgpu on|off] [--small-pods 200] [--small-timeout 300]
#                            [--dra-scores on|off] [--state-dir DIR] [--port-base N]
#   (--cards LAYOUT is --dra LAYOUT.)
# Needs the build's mgpu-scheduler-extender, mgpu-api-nodes and mgpu-dra-slices, curl, jq, bc and openssl.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
qps=1000 nodes=1000 pods=2000 delay_ms=1000 dra=fixed mgpu=on dra_scores=on small_pods=200 small_timeout=300
state=/tmp/mgpu-bench-dra port_base=27040
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) qps=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --cards | --dra) dra=$2; shift 2 ;;
    --mgpu) mgpu=$2; shift 2 ;;
    --small-pods) small_pods=$2; shift 2 ;;
    --small-timeout) small_timeout=$2; shift 2 ;;
    --dra-scores) dra_scores=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    *) echo "realcluster_dra.sh: unknown argument $1 (see the top of the script)" >&2; exit 2 ;;
  esac
done
cluster() { bash "$repo/scripts/cluster.sh" "$1" --state-dir "$state" --port-base "$port_base" "${@:2}"; }
qps_flag=()
[ "$qps" = default ] || qps_flag=(--scheduler-qps "$qps" --controller-qps "$qps")
trap 'kill $extender_pid 2>/dev/null || true; cluster down >/dev/null 2>&1 || true' EXIT
extender_pid=""
# The shipped scheduler configuration with the profiles of the all-nodes and pct@N phases.
mkdir -p "$state"
bench_profiles='  - schedulerName: bench-all-nodes\n    percentageOfNodesToScore: 100'
for layout in $dra; do
  case "$layout" in
    pct@*) bench_profiles+="\\n  - schedulerName: bench-p${layout#pct@}\\n    percentageOfNodesToScore: ${layout#pct@}" ;;
  esac
done
sed "s|^profiles:|profiles:\\n$bench_profiles|" \
  "$repo/deploy/extender/scheduler-config.yaml" >"$state/bench-scheduler-config.yaml"
grep -q bench-all-nodes "$state/bench-scheduler-config.yaml" || {
  echo "realcluster_dra.sh: deploy/extender/scheduler-config.yaml has no profiles: list" >&2
  exit 1
}
cluster up --no-kubelet --api-nodes "$nodes" --api-node-cards 8x81920,2x24576,4x16384 \
  --confirm-after-ms "$delay_ms" "${qps_flag[@]}" --scheduler-config "$state/bench-scheduler-config.yaml" >&2
# shellcheck source=/dev/null
source "$state/env"
kubectl() { "$MGPU_K8S_BIN/kubectl" "$@"; }
# publish CARDS [SELECTOR]: the nodes' slices as mgpu's node daemon publishes them with dra.cards CARDS.
publish() {
  printf 'dra:\n  cards: %s\n' "$1" >"$state/dra-config.yaml"
  "$build/src/tools/mgpu-dra-slices" --kubeconfig "$state/kubeconfig" --config "$state/dra-config.yaml" \
    ${2:+--selector "$2"} >&2
}
kubectl apply -f "$repo/deploy/dra/deviceclasses.yaml" >/dev/null

# The extender, serving a certificate for the name kube-scheduler calls and for 127.0.0.1 (the API server's
# webhook calls), signed by the CA cluster.sh gave the scheduler.
tls=$state/extender-tls
(cd "$tls" && openssl req -new -newkey rsa:2048 -nodes -keyout bench.key -subj /CN=mgpu-bench -out bench.csr &&
  printf 'subjectAltName=DNS:mgpu-scheduler-extender.mgpu-system.svc,IP:127.0.0.1\n' >bench.ext &&
  openssl x509 -req -in bench.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile bench.ext \
    -out bench.crt) >/dev/null 2>&1
printf 'extender:\n  listenAddress: 127.0.0.1:%s\n  tlsCertFile: %s\n  tlsKeyFile: %s\n' \
  "$MGPU_CLUSTER_EXTENDER_PORT" "$tls/bench.crt" "$tls/bench.key" >"$state/extender.yaml"
"$build/src/extender/mgpu-scheduler-extender" --kubeconfig "$state/kubeconfig" --config "$state/extender.yaml" \
  >"$state/logs/extender.log" 2>&1 &
extender_pid=$!
for ((i = 0; i < 300; i++)); do
  curl -sk --max-time 1 "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT/readyz" >/dev/null && break
  sleep 0.2
done
# deploy/dra/'s pod webhooks, pointed at the extender on this machine.
kubectl create --dry-run=client -o json -f "$repo/deploy/dra/webhook.yaml" |
  jq --arg url "https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT" --arg ca "$(tr -d '\n' <"$tls/caBundle")" '
    if .kind == "List" then .items[] else . end | select(.kind == "MutatingWebhookConfiguration") |
    .webhooks |= map(.clientConfig = {url: ($url + .clientConfig.service.path), caBundle: $ca})' |
  kubectl create -f - >/dev/null
kubectl create -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: bare.mgpu.io}
spec:
  selectors:
    - cel: {expression: device.driver == "mgpu.io"}
YAML
# The claim of every DRA pod: 20 cores and 4 GiB of class mgpu.io (c20-m4g), or of the bare class; whole-1,
# one whole card, as /mutate writes it for a dedicated_cores pod.
for class in mgpu.io bare.mgpu.io; do
  printf '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"%s","namespace":"default"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"%s","capacity":{"requests":{"cores":"20","memory":"4Gi"}}}}]}}}}' \
    "$([ "$class" = mgpu.io ] && echo c20-m4g || echo bare-c20-m4g)" "$class" | kubectl create -f - >/dev/null
done
printf '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"whole-1","namespace":"default"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"whole.mgpu.io","allocationMode":"ExactCount","count":1}}]}}}}' |
  kubectl create -f - >/dev/null

# phase NAME KIND [COUNT] [TIMEOUT] [NODE-LABEL] [SCHEDULER]: creates COUNT (--pods) pods of KIND (plain, mgpu,
# dra, bare, byhand, whole, extres) named NAME-<i> (in the profile SCHEDULER, default-scheduler by default) with the
# scheduler paused, resumes it, waits until all are bound (or TIMEOUT seconds, 1200 by default), and says the
# rate and kube-scheduler's CPU over the phase.
phase() {
  local name=$1 kind=$2 count=${3:-$pods} timeout=${4:-1200} label=${5:-} scheduler=${6:-} i spec start bound extra
  local scheduler_pid template=c20-m4g limits=$dra_limits annotations=$dra_annotations
  [ "$kind" != bare ] || template=bare-c20-m4g
  [ "$kind" != byhand ] || limits="" annotations=""
  if [ "$kind" = whole ]; then
    template=whole-1
    [ -z "$annotations" ] || annotations=',"annotations":{"katalyst.kubewharf.io/qos_level":"dedicated_cores","mgpu.io/dra-limits":"{\"main\":{\"mgpu.io/mgpu-core\":\"100\",\"mgpu.io/mgpu-memory\":\"1\"}}"}'
  fi
  extra=""
  [ -z "$label" ] || extra=',"nodeSelector":{"'"$label"'":"true"}'
  [ -z "$scheduler" ] || extra+=',"schedulerName":"'"$scheduler"'"'
  cluster pause kube-scheduler >&2
  {
    echo '{"apiVersion":"v1","kind":"List","items":['
    for ((i = 0; i < count; i++)); do
      case "$kind" in
        plain) spec='"containers":[{"name":"main","image":"x","resources":{"requests":{"cpu":"100m","memory":"1Gi"}}}]' ;;
        mgpu) spec='"containers":[{"name":"main","image":"x","resources":{"limits":{"mgpu.io/mgpu-core":"20","mgpu.io/mgpu-memory":"4096"},"requests":{"cpu":"100m","memory":"1Gi"}}}]' ;;
        extres) spec='"containers":[{"name":"main","image":"x","resources":{"limits":{"mgpu.io/gpu":"1"},"requests":{"cpu":"100m","memory":"1Gi"}}}]' ;;
        *) spec='"resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"'"$template"'"}],"containers":[{"name":"main","image":"x","resources":{"claims":[{"name":"gpu"}],"requests":{"cpu":"100m","memory":"1Gi"}'"$limits"'}}]'"$extra" ;;
      esac
      [ "$i" = 0 ] || echo ,
      printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s-%d","namespace":"default","labels":{"phase":"%s"}%s},"spec":{%s}}' \
        "$name" "$i" "$name" "$(case "$kind" in plain | mgpu | byhand | extres) ;; *) echo "$annotations" ;; esac)" "$spec"
    done
    echo ']}'
  } >"$state/pods-$name.json"
  kubectl create -f "$state/pods-$name.json" >/dev/null
  if [ "$kind" = byhand ]; then
    echo "  $name: $(kubectl get pods -n default -l phase="$name" -o json | jq '[.items[] |
      select(.metadata.annotations["mgpu.io/dra-limits"] and .spec.containers[0].resources.limits["mgpu.io/dra-gpu"])] |
      length') of $count pods given mgpu.io/dra-gpu and mgpu.io/dra-limits by /mutate-claims"
  fi
  if [ "$kind" = extres ]; then
    echo "  $name: $(kubectl get pods -n default -l phase="$name" -o json | jq '[.items[] |
      select(.metadata.annotations["mgpu.io/dra-limits"] and .spec.schedulerName == "mgpu-dra")] |
      length') of $count pods given mgpu.io/dra-limits and the DRA profile by /mutate-claims"
  fi
  if [ "$kind" != plain ] && [ "$kind" != mgpu ] && [ "$kind" != extres ]; then
    # Every pod's claim made from its template by kube-controller-manager before the scheduler resumes, so
    # that the rate is the scheduler's (at its default 20 QPS the controller lets about 10 pods a second through).
    local made=0 waited
    waited=$(date +%s.%N)
    for ((i = 0; i < 600; i++)); do
      made=$(kubectl get resourceclaims -n default -o name | grep -c "^resourceclaim.resource.k8s.io/$name-" || true)
      [ "$made" -lt "$count" ] || break
      sleep 1
    done
    echo "  $name: $made claims made from their templates in $(echo "$(date +%s.%N) - $waited" | bc | cut -c1-5) s, the scheduler paused"
  fi
  start=$(date +%s.%N)
  cluster resume kube-scheduler >&2  # a new kube-scheduler process (pause stopped it): its CPU is the phase's
  scheduler_pid=$(cat "$state/pids/kube-scheduler")
  while :; do
    bound=$(kubectl get pods -n default -l phase="$name" -o json | jq '[.items[] | select(.spec.nodeName)] | length')
    [ "$bound" -lt "$count" ] || break
    if [ "$(echo "$(date +%s.%N) - $start > $timeout" | bc)" = 1 ]; then
      echo "realcluster_dra.sh: only $bound of $count $name pods bound after $timeout s" >&2
      break
    fi
    sleep 1
  done
  local wall cpu
  wall=$(echo "$(date +%s.%N) - $start" | bc | cut -c1-6)
  cpu=$(echo "$(sed 's/.*) //' "/proc/$scheduler_pid/stat" | awk '{print $12 + $13}') / $(getconf CLK_TCK)" | bc -l | cut -c1-6)
  echo "  $name pods: $(kubectl get pods -n default -l phase="$name" -o json |
    jq -r '[.items[] | .status.conditions[]? |
      select(.type == "PodScheduled" and .status == "True") | .lastTransitionTime | fromdate] |
      if length == 0 then "0 bound" else "\(length) bound, \(length / (max - min + 1) * 10 | round / 10) pods/s" end'), wall $wall s, kube-scheduler CPU $cpu s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
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

echo "real kube-scheduler $(kubectl version -o json | jq -r .serverVersion.gitVersion), client QPS $qps, $nodes nodes, $pods pods a phase, DRA phases: $dra, DRA pods scored by the extender: $dra_scores; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
phase plain plain
if [ "$mgpu" = on ]; then
  phase mgpu mgpu
  sleep $((delay_ms / 1000 + 2))
  read -r used over < <(extender_cards)
  echo "  mgpu pods' cards (the extender's view): $used used, $over over capacity"
  read -r _ mgpu_over < <(extender_cards)
  kubectl delete pods -n default -l phase=mgpu --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
fi
# Every claim's consumed capacity summed per card, against the card's capacity as its slice publishes it.
mib='def mib: if endswith("Gi") then (.[:-2] | tonumber * 1024) elif endswith("Mi") then (.[:-2] | tonumber)
  else (tonumber / 1048576) end;'
dra_cards() {
  kubectl get resourceslices -o json | jq "$mib"'
    [.items[] | .spec.pool.name as $pool | .spec.devices[]? | select(.capacity.memory) |
     {key: ($pool + "/" + (.name | capture("^gpu-(?<i>[0-9]+)-").i)), value: (.capacity.memory.value | mib)}] |
    from_entries' >"$state/capacity.json"
  kubectl get resourceclaims -n default -o json | jq -r --slurpfile capacity "$state/capacity.json" "$mib"'
    [.items[] | .status.allocation.devices.results[]? | select(.driver == "mgpu.io") |
     {card: (.pool + "/" + (.device | capture("^gpu-(?<i>[0-9]+)-").i)),
      cores: (.consumedCapacity.cores // "0" | tonumber), memory: (.consumedCapacity.memory // "0" | mib)}] |
    group_by(.card) | map({card: .[0].card, cores: (map(.cores) | add), memory: (map(.memory) | add)}) |
    "\(length) \(map(select(.cores > 100 or .memory > $capacity[0][.card])) | length) \(map(.card | split("/")[0]) | unique | length)"'
}
# Until the previous phase's pods, their claims and the extender's view of them are gone.
clean() {
  kubectl delete pods -n default -l 'phase notin (plain)' --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  for ((i = 0; i < 600; i++)); do
    read -r used _ < <(extender_cards)
    [ "$used" != 0 ] || [ "$(kubectl get resourceclaims -n default -o name | wc -l)" != 0 ] || break
    sleep 1
  done
}
dra_over=0 mgpu_over=${mgpu_over:-0} published=""
for layout in $dra; do
  clean
  case "$layout" in
    bare)
      [ "$published" = fixed ] || publish fixed
      kubectl get resourceslices -o json | jq '.items[] |= (del(.metadata.managedFields) |
        .spec.devices[]? |= (del(.attributes) | del(.capacity.reclaimedCores)))' >"$state/bare-slices.json"
      kubectl replace -f "$state/bare-slices.json" >/dev/null
      published=bare
      phase "dra-bare" bare ;;
    byhand) phase "dra-byhand" byhand ;;
    whole | extres)
      [ "$published" = fixed ] || publish fixed
      published=fixed
      phase "dra-$layout" "$layout" "" "" "" "$([ "$layout" = whole ] && echo mgpu-dra)" ;;
    profile | all-nodes | pct@*)
      [ "$published" = fixed ] || publish fixed
      published=fixed
      case "$layout" in
        profile) profile_name=mgpu-dra ;;
        all-nodes) profile_name=bench-all-nodes ;;
        *) profile_name=bench-p${layout#pct@} ;;
      esac
      phase "dra-${layout/@/-}" dra "" "" "" "$profile_name" ;;
    any@*)
      n=${layout#any@}
      kubectl label nodes $(for ((i = 0; i < n; i++)); do printf 'api-node-%04d ' "$i"; done) "bench.mgpu.io/six-$n=true" >/dev/null
      publish any "bench.mgpu.io/six-$n=true"
      published=mixed
      phase "dra-any-$n" dra "$small_pods" "$small_timeout" "bench.mgpu.io/six-$n" ;;
    *)
      [ "$published" = "$layout" ] || publish "$layout"
      published=$layout
      phase "dra-$layout" dra ;;
  esac
  read -r used over nodes_used < <(dra_cards)
  echo "  $layout: cards used $used on $nodes_used nodes, $over over capacity (cores or memory)"
  dra_over=$((dra_over + over))
done
[ "$dra_over" = 0 ] && [ "$mgpu_over" = 0 ] || { echo "realcluster_dra.sh: cards over capacity" >&2; exit 1; }
