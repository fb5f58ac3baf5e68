#!/usr/bin/env bash
# The trace replay's placement against the real kube-scheduler (issue 41 point 2; bench/RESULTS.md section 1,
# "The replay against the real kube-scheduler"), one command:
#   scripts/cluster.sh without a kubelet: etcd, kube-apiserver, kube-controller-manager, kube-scheduler v1.36.2
#   with deploy/extender/scheduler-config.yaml as shipped (or --scheduler-config FILE); the openb trace's
#   1,213 nodes as API-only nodes kept by mgpu-api-nodes, each with its own CPU, memory, cards and GPU model
#   (the D/gpu.product label, and card memory per model as the replay has them), from
#   `mgpu_trace_replay --export`; mgpu-scheduler-extender on the host as its pod runs
#   (bench/realcluster_extender.sh), with deploy/base's config.yaml.
# For each seed, the first --pods pods of the replay's arrivals (the list sorted by name, shuffled with the
# seed, inflated: `mgpu_trace_replay --export` writes them, so both sides place the same pods) are created one
# at a time, in order, each once the one before it is bound or reported unschedulable, as the replay places
# each pod before the next arrives. A GPU pod asks its CPU and memory (requests), its mgpu-core (the replay's
# rounding of gpu_milli, times the cards) and 1 MiB of mgpu-memory per card (the replay constrains no GPU
# memory; the extender needs some), and is held to its GPU models by nodeSelector or required node affinity
# on D/gpu.product; a CPU-only pod asks only CPU and memory. A GPU pod counts as placed once its node's
# stand-in (mgpu-api-nodes --confirm-after-ms 1) has confirmed its cards, as a kubelet admits a pod within
# a second: with nothing confirmed, the extender holds back every later pod asking the same mgpu-memory on
# other cards of that node (the ambiguity guard, docs/design.md §5), and all of these ask the same. A pod
# kube-scheduler tries again after an error is waited for (and counted). A pod kube-scheduler reports
# unschedulable is deleted at once: the replay tries a pod once and never again (kube-scheduler would try
# it again later).
# Before each seed the pods of the one before are deleted and kube-scheduler and the extender started again
# (both start from nothing, as the replay does: the scheduler's rotating start index, the extender's
# workload model).
# The node lifecycle controller waits an hour for a node's Lease (cluster.sh --node-grace-period 1h): on a
# loaded machine it would taint nodes whose leases came late, which the replay's nodes never are (the script
# waits until every node is Ready and untainted before the pods, and checks again at the end of each seed).
# Prints per seed: unallocated GPU % over the cluster's GPUs as the replay counts it (100 less the bound pods'
# mgpu-core over 100 per GPU: a sharing pod counts its share), at the end of the prefix and, when the prefix
# reaches it, at the 100 % mark (the pod whose arrival brings the GPUs asked to the cluster's); the pods that
# failed by kind (CPU-only / sharing / one whole GPU / multi-GPU); the cards over capacity in the extender's
# view (must be 0), the GPUs it counts allocated, and the most pods on one node (110 allowed, which the replay
# does not model). With --replay-policies, the replay's own lines for the same trace, seed and prefix.
#   bench/realcluster_openb.sh [--trace default] [--seeds 42,43,44] [--pods 2000]
#       [--scheduler-config FILE] [--replay-policies mgpu-as-shipped] [--state-dir DIR] [--port-base N]
# Needs the build's mgpu-scheduler-extender, mgpu-api-nodes and mgpu_trace_replay (bash scripts/setup.sh
# mgpu-scheduler-extender mgpu-api-nodes mgpu_trace_replay), curl and jq; exits 3 without the Kubernetes
# binaries (scripts/cluster.sh). A benchmark: its time per pod depends on the machine's load.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
trace=default seeds=42 pods=2000 replay_policies=""
scheduler_config=$repo/deploy/extender/scheduler-config.yaml
state=/tmp/mgpu-openb-cluster port_base=26600
while [ $# -gt 0 ]; do
  case "$1" in
    --trace) trace=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --scheduler-config) scheduler_config=$2; shift 2 ;;
    --replay-policies) replay_policies=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    *) echo "realcluster_openb.sh: unknown argument $1 (see the top of the script)" >&2; exit 2 ;;
  esac
done
die() {
  echo "realcluster_openb.sh: $*" >&2
  exit 1
}
for tool in curl jq; do command -v $tool >/dev/null || die "$tool is not installed."; done
for binary in src/extender/mgpu-scheduler-extender src/tools/mgpu-api-nodes bench/mgpu_trace_replay; do
  [ -x "$build/$binary" ] || die "$build/$binary is not built (bash scripts/setup.sh $(basename $binary))."
done
[ -f "$scheduler_config" ] || die "the scheduler configuration $scheduler_config does not exist."
[[ "$pods" =~ ^[1-9][0-9]*$ ]] || die "--pods must be a positive number, not $pods."
[[ "$seeds" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--seeds must be seeds separated by commas, not $seeds."
mkdir -p "$state/trace"
state=$(cd "$state" && pwd)
replay=$build/bench/mgpu_trace_replay

# The cluster and the arrivals, as the replay makes them.
IFS=, read -ra seed_list <<<"$seeds"
for seed in "${seed_list[@]}"; do
  "$replay" --export "$state/trace" --traces "$trace" --seeds 1 --first-seed "$seed" --limit "$pods" ||
    die "mgpu_trace_replay could not export the $trace list."
done
cluster_gpus=$(awk -F, 'NR > 1 {n += $4} END {print n}' "$state/trace/nodes.csv")

cluster() { bash "$repo/scripts/cluster.sh" "$1" --state-dir "$state" --port-base "$port_base" "${@:2}"; }
extender_pid="" watch_pids=""
trap 'kill $watch_pids 2>/dev/null || true; kill $extender_pid 2>/dev/null || true; cluster down >/dev/null 2>&1 || true' EXIT
# The extender as its pod runs (bench/realcluster_extender.sh), and its config for the nodes' stand-ins.
# shellcheck source=realcluster_extender.sh
source "$repo/bench/realcluster_extender.sh"
daemons_config "$repo" >"$state/daemons-config.yaml"
cluster up --no-kubelet --api-node-config "$state/daemons-config.yaml" --node-grace-period 1h \
  --api-node-list "$state/trace/nodes.csv" --confirm-after-ms 1 --scheduler-config "$scheduler_config" >&2
# shellcheck source=/dev/null
source "$state/env"
kubectl() { "$MGPU_K8S_BIN/kubectl" "$@"; }
api() { curl -s --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" --key "$state/pki/admin.key" "$@"; }
pods_url=$MGPU_CLUSTER_APISERVER/api/v1/namespaces/default/pods
label=mgpu.io/gpu.product  # D/gpu.product with deploy/base's resourceDomain

# The pods of the arrivals (lines index,trace_pod,kind,cpu_milli,memory_mib,cards,core,models after the
# header), one JSON line each, in order: one jq for the whole list, not one a pod.
pods_jsonl() {
  tail -n +2 "$1" | jq -cR --arg key "$label" '
    split(",") as [$index, $trace_pod, $kind, $cpu, $memory, $cards, $core, $models]
    | ($cards | tonumber) as $n
    | {apiVersion: "v1", kind: "Pod",
       metadata: {name: ("openb-" + ("0000" + $index | .[-5:])), labels: {"openb-kind": $kind},
                  annotations: {"openb-trace-pod": $trace_pod}},
       spec: {automountServiceAccountToken: false, terminationGracePeriodSeconds: 0,
              containers: [{name: "main", image: "registry.example/infer:1",
                            resources: ({requests: {cpu: ($cpu + "m"), memory: ($memory + "Mi")}} +
                              if $n > 0 then {limits: {"mgpu.io/mgpu-core": $core, "mgpu.io/mgpu-memory": $cards}}
                              else {} end)}]}}
    | (($models // "") | split("|") | map(select(. != ""))) as $m
    | if ($m | length) == 1 then .spec.nodeSelector = {($key): $m[0]}
      elif ($m | length) > 1 then .spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        .nodeSelectorTerms = [{matchExpressions: [{key: $key, operator: "In", values: $m}]}]
      else . end'
}

# Nodes that are not Ready or carry a taint (kube-scheduler would not place a pod there).
unfit_nodes() {
  kubectl get nodes -o json | jq '[.items[] | select((.spec.taints // []) != [] or
    ([.status.conditions[] | select(.type == "Ready" and .status == "True")] == []))] | length'
}
for _ in $(seq 150); do [ "$(unfit_nodes)" != 0 ] || break; sleep 2; done
[ "$(unfit_nodes)" = 0 ] || die "$(unfit_nodes) nodes are still not Ready or tainted after 300 s."

echo "real kube-scheduler $(kubectl version -o json | jq -r .serverVersion.gitVersion) with $scheduler_config; $(($(grep -c . "$state/trace/nodes.csv") - 1)) nodes, $cluster_gpus GPUs; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
kinds=(cpu share one multi)
first_seed=1
for seed in "${seed_list[@]}"; do
  arrivals=$state/trace/$trace-$seed.csv
  if [ $first_seed = 0 ]; then
    stop_extender
    kubectl delete pods -n default --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    until [ "$(kubectl get pods -n default -o name | wc -l)" = 0 ]; do sleep 1; done
    cluster pause kube-scheduler >&2
    cluster resume kube-scheduler >&2
  fi
  first_seed=0
  start_extender "$repo" "$build" "$state"
  # Every change to the namespace's pods, one line each on watch_fd: NAME NODE-OR-- PODSCHEDULED-REASON-OR--
  # CONFIRMED (yes when the pod's D/gpu-allocated is written).
  rm -f "$state/watch.raw" "$state/watch.lines"
  mkfifo "$state/watch.raw" "$state/watch.lines"
  # timeoutSeconds: without it the API server ends a watch after 30 to 60 minutes (handleWatch in the
  # apiserver's endpoints/handlers/get.go), in the middle of a seed of a few thousand pods.
  api -N "$pods_url?watch=1&timeoutSeconds=86400" >"$state/watch.raw" &
  watch_pids=$!
  jq --unbuffered -r '.object | [.metadata.name, (.spec.nodeName // "-"),
    ((.status.conditions // []) | map(select(.type == "PodScheduled")) | .[0].reason // "-"),
    (if (.metadata.annotations // {}) | has("mgpu.io/gpu-allocated") then "yes" else "no" end)] | join(" ")' \
    <"$state/watch.raw" >"$state/watch.lines" &
  watch_pids+=" $!"
  exec {watch_fd}<"$state/watch.lines"
  declare -A failed=() at100_failed=()
  for k in "${kinds[@]}"; do failed[$k]=0; done
  allocated=0 arrived=0 at100="" count=0 errors=0
  : >"$state/failed-$seed.txt"
  pods_jsonl "$arrivals" >"$state/pods-$seed.jsonl"
  exec {pods_fd}<"$state/pods-$seed.jsonl"
  begin=$(date +%s.%N)
  while IFS=, read -r index _ kind _ _ cards core _; do
    printf -v name 'openb-%05d' "$index"
    read -r -u "$pods_fd" pod
    code=$(api -o "$state/create.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      --data-binary "$pod" "$pods_url")
    [ "$code" = 201 ] || die "the API server refused pod $name (HTTP $code): $(head -c 300 "$state/create.out")"
    outcome="" last_reason=-
    while [ -z "$outcome" ]; do
      read -r -t 120 -u "$watch_fd" seen node reason confirmed ||
        die "pod $name was neither bound nor reported unschedulable in 120 s (the watch read failed)."
      [ "$seen" = "$name" ] || continue
      if [ "$node" != - ]; then
        # A GPU pod once its node's stand-in has confirmed its cards, as a kubelet would have admitted it:
        # until then the extender holds back a pod asking the same mgpu-memory there (the ambiguity guard).
        [ "$cards" = 0 ] || [ "$confirmed" = yes ] || continue
        outcome=placed
      elif [ "$reason" = Unschedulable ]; then
        outcome=failed
      elif [ "$reason" != - ] && [ "$reason" != "$last_reason" ]; then
        errors=$((errors + 1))  # kube-scheduler retries it (SchedulerError: the extender said wait)
      fi
      last_reason=$reason
    done
    arrived=$((arrived + core))
    if [ $outcome = placed ]; then
      allocated=$((allocated + core))
    else
      api -o /dev/null -X DELETE "$pods_url/$name?gracePeriodSeconds=0"
      echo "$name $kind" >>"$state/failed-$seed.txt"
    fi
    [ $outcome = placed ] || failed[$kind]=$((failed[$kind] + 1))
    count=$((count + 1))
    if [ -z "$at100" ] && [ "$arrived" -ge $((100 * cluster_gpus)) ]; then
      at100="$count $allocated"
      # shellcheck disable=SC2034  # read through failed_text's nameref
      for k in "${kinds[@]}"; do at100_failed[$k]=${failed[$k]}; done
    fi
  done < <(tail -n +2 "$arrivals")
  end=$(date +%s.%N)
  exec {pods_fd}<&-
  # shellcheck disable=SC2086
  kill $watch_pids 2>/dev/null || true
  exec {watch_fd}<&-
  watch_pids=""
  unallocated() { awk -v a="$1" -v g="$cluster_gpus" 'BEGIN {printf "%.2f", 100 - a / g}'; }
  failed_text() {  # the name of an associative array of counts by kind
    local -n f=$1
    echo "${f[cpu]}/${f[share]}/${f[one]}/${f[multi]}"
  }
  nodes_json=$(curl -sk "$extender_url/v1/nodes")
  over=$(echo "$nodes_json" | jq '[.nodes[].cards[] | select(.core > 100 or .reclaimedCore > 100 or .memoryMiB > .capacityMiB)] | length')
  extender_gpus=$(echo "$nodes_json" | jq '[.nodes[].cards[].core] | add / 100')
  most=$(kubectl get pods -n default -o json | jq '[.items[] | .spec.nodeName] | group_by(.) | map(length) | max // 0')
  echo "seed $seed: $count pods of $trace in $(awk -v b="$begin" -v e="$end" -v n="$count" 'BEGIN {printf "%.0f s (%.0f ms a pod)", e - b, 1000 * (e - b) / n}'):" \
    "unallocated $(unallocated "$allocated") % at the end, failed c/s/1/m $(failed_text failed);" \
    "cards over capacity $over, the extender counts $extender_gpus GPUs allocated; most pods on a node $most;" \
    "nodes not Ready or tainted $(unfit_nodes); $errors pods kube-scheduler tried again after an error"
  if [ -n "$at100" ]; then
    read -r n a <<<"$at100"
    echo "seed $seed: at the 100 % mark (pod $n): unallocated $(unallocated "$a") %, failed c/s/1/m $(failed_text at100_failed)"
  fi
  if [ -n "$replay_policies" ]; then
    "$replay" --traces "$trace" --seeds 1 --first-seed "$seed" --limit "$pods" --threads 1 \
      --policies "$replay_policies" | sed -n "s/^/seed $seed: replay: /; /^seed $seed: replay: $trace /p"
  fi
done
