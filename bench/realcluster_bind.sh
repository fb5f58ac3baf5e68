#!/usr/bin/env bash
# Bind throughput and CPU per pod through the real kube-scheduler (v1.36.2, ../shared/k8s/) and the real API
# server (issue 27; bench/RESULTS.md section 5), one command:
#   scripts/cluster.sh without a kubelet: etcd, kube-apiserver, kube-controller-manager, kube-scheduler with
#   deploy/extender/scheduler-config.yaml as shipped (or its two-verb variant, --verbs filter-prioritize);
#   1,000 API-only nodes (8 x 80 GiB, 2 x 24 GiB and 4 x 16 GiB cards in turn) kept by mgpu-api-nodes, which
#   stand in for the nodes and their device plugins: a plugin whose kubelet gave a pod its assigned cards
#   writes nothing (docs/design.md §5 step 4), so by default nothing is written after the bind; --delay-ms N
#   has them write each pod's assignment as gpu-allocated N ms after its bind, the confirmation the plugin
#   wrote for every GPU pod before (to compare); mgpu-scheduler-extender on the host with deploy/base's
#   config.yaml, over HTTPS, as deploy/extender's ServiceAccount (with that RBAC, by a token of it). No kubelet
#   status is written for any pod, plain or mgpu.
# Phases (--phases, in order): `plain` (plain pods alone), `mgpu` (mgpu pods alone), `mixed` (both kinds in
# one run), `plain-default` (plain pods alone under kube-scheduler's default configuration: the same file
# without its extenders and its percentageOfNodesToScore, swapped in while kube-scheduler is paused, the
# shipped one back for the next phase; plain pods' rate with and without mgpu in one run, issue 41). In each,
# kube-scheduler is paused while the phase's pods are created (mgpu pods of 20 percent core and 4 GiB, plain
# pods of 100m CPU), then resumed; the phase ends when every pod is bound and, with
# --delay-ms, the stand-ins have confirmed every mgpu pod (a gpu-allocated PATCH each). Then its pods
# are deleted before the next phase. Phases may repeat (--phases mgpu,mgpu,mgpu: churn).
# Prints per phase: pods/s of each kind (from their PodScheduled times, 1 s resolution); the CPU each process
# spent per pod (utime + stime from /proc/PID/stat before and after, less its idle rate, measured over 20 s,
# one lease period of mgpu-api-nodes, right before the phase with its pods created, since the API server's
# idle cost keeps falling for minutes after the nodes appear; kube-scheduler's, paused then, and its own
# start-up, a pause and resume with nothing to schedule, once at the start); the API server's writes to pods
# and events per pod (its apiserver_request_total; those refused with 429 apart), the pod watch events it sent
# per pod and their bytes, and the TCP connections opened on the machine; kube-scheduler's attempts by result;
# the extender's binds, errors and refused connections, the events it created or skipped, the cards in use and
# any card over-committed. On a machine this small every figure,
# the CPU per pod too, depends on what else runs (more in flight at once costs more each): the script prints
# the load average.
# The extender's memory (RSS, its mgpu_extender_heap_bytes, threads) before the first phase, with each phase's
# pods bound, and once they are deleted and it has settled: its burst's workers ended and the API connections
# its binds opened closed (each holds a TLS context and buffers, ~200 kB; kube::Client closes one 90 s after
# its last use), with how long after the last bind that was (issue 27's "memory you can state").
# --profile DIR: the cluster serves /debug/pprof, and 2 s into each phase a 6 s CPU profile of kube-scheduler
# and of kube-apiserver is taken into DIR/N-PHASE-NAME.pb.gz (read them with `go tool pprof -top BINARY FILE`,
# the binary in the cluster's MGPU_K8S_BIN; Debian's golang-go has it). The profiler samples at 100 Hz: it
# costs the phase a little CPU.
#   bench/realcluster_bind.sh [--qps 1000|default] [--nodes 1000] [--pods 2000] [--plain 2000]
#       [--delay-ms 0] [--verbs choose|filter-prioritize] [--phases plain,mgpu,mixed,plain-default]
#       [--state-dir DIR] [--port-base N] [--profile DIR]
# Needs the build's mgpu-scheduler-extender and mgpu-api-nodes (bash scripts/setup.sh mgpu-scheduler-extender
# mgpu-api-nodes), curl, jq, bc and ss (iproute2). A benchmark, not a test: run it under nice on a machine as
# quiet as you have.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
qps=1000 nodes=1000 pods=2000 plain=2000 delay_ms=0 verbs=choose phases=plain,mgpu,mixed
state=/tmp/mgpu-bench-cluster port_base=26500 profile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --qps) qps=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --plain) plain=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --verbs) verbs=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    *) echo "realcluster_bind.sh: unknown argument $1 (see the top of the script)" >&2; exit 2 ;;
  esac
done
die() {
  echo "realcluster_bind.sh: $*" >&2
  exit 1
}
for tool in curl jq bc; do command -v $tool >/dev/null || die "$tool is not installed."; done
for binary in src/extender/mgpu-scheduler-extender src/tools/mgpu-api-nodes; do
  [ -x "$build/$binary" ] || die "$build/$binary is not built (bash scripts/setup.sh $(basename $binary))."
done
mkdir -p "$state"
state=$(cd "$state" && pwd)

# kube-scheduler's configuration: as shipped, or the two-verb mode its comments describe.
shipped=$repo/deploy/extender/scheduler-config.yaml
case "$verbs" in
  choose) scheduler_config=$shipped ;;
  filter-prioritize)
    scheduler_config=$state/scheduler-config-two-verb.yaml
    if grep -q '^    prioritizeVerb: prioritize' "$shipped"; then
      cp "$shipped" "$scheduler_config"
    else
      sed -e 's|^    filterVerb: choose.*|    filterVerb: filter\n    prioritizeVerb: prioritize|' "$shipped" >"$scheduler_config"
    fi
    grep -q 'prioritizeVerb: prioritize' "$scheduler_config" ||
      die "$shipped no longer has the line 'filterVerb: choose' this script replaces."
    ;;
  *) die "--verbs must be choose or filter-prioritize, not $verbs" ;;
esac

cluster() { bash "$repo/scripts/cluster.sh" "$1" --state-dir "$state" --port-base "$port_base" "${@:2}"; }
qps_flag=()
[ "$qps" = default ] || qps_flag=(--scheduler-qps "$qps")
profiling_flag=()
if [ -n "$profile" ]; then
  mkdir -p "$profile"
  profile=$(cd "$profile" && pwd)
  profiling_flag=(--profiling)
fi
extender_pid=""
trap 'kill $extender_pid 2>/dev/null || true; cluster down >/dev/null 2>&1 || true' EXIT
# The extender as its pod runs (bench/realcluster_extender.sh), and its config for the nodes' stand-ins.
# shellcheck source=realcluster_extender.sh
source "$repo/bench/realcluster_extender.sh"
daemons_config "$repo" >"$state/daemons-config.yaml"
cluster up --no-kubelet --api-node-config "$state/daemons-config.yaml" --api-nodes "$nodes" \
  --api-node-cards 8x81920,2x24576,4x16384 --confirm-after-ms "$delay_ms" --scheduler-config "$scheduler_config" "${qps_flag[@]}" "${profiling_flag[@]}" >&2
# shellcheck source=/dev/null
source "$state/env"
kubectl() { "$MGPU_K8S_BIN/kubectl" "$@"; }

# The extender as its pod runs (bench/realcluster_extender.sh).
start_extender "$repo" "$build" "$state"
extender_started=$(date +%s.%N)

clk=$(getconf CLK_TCK)
processes=(etcd kube-apiserver kube-controller-manager kube-scheduler api-nodes extender)
pid_of() { if [ "$1" = extender ]; then echo $extender_pid; else cat "$state/pids/$1"; fi; }
# utime + stime of a process, in clock ticks (the fields after the command name, which may hold spaces).
# A process that is not running (kube-scheduler while paused: a resume starts a new one) has spent none.
ticks() {
  if [ -r "/proc/$1/stat" ]; then sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; else echo 0; fi
}
declare -A t0 idle_rate
sample() {  # into t0
  local p
  for p in "${processes[@]}"; do t0[$p]=$(ticks "$(pid_of "$p")"); done
}
now() { date +%s.%N; }
# GET from a control-plane component as the cluster's admin: curl's arguments after the certificate.
admin_get() { curl -sk --cert "$state/pki/admin.crt" --key "$state/pki/admin.key" "$@"; }
scheduler_url=https://127.0.0.1:$((port_base + 4))
metric() {  # sum of the samples of a metric (a regular expression on the whole series) in $1's text
  echo "$1" | awk -v re="^$2 " '$0 ~ re {s += $NF} END {print s + 0}'
}
# The API server's count of writes to pods and events so far, one line per verb, resource and subresource
# ("POST pods/binding 2000"), from its apiserver_request_total; those it refused with 429 (its priority and
# fairness queues full: the client tries again after the Retry-After second) on lines of their own ("POST
# pods/binding-429 120").
api_writes() {
  admin_get --max-time 5 "$MGPU_CLUSTER_APISERVER/metrics" |
    awk '/^apiserver_request_total\{/ {
      verb = $0; sub(/.*verb="/, "", verb); sub(/".*/, "", verb)
      resource = $0; sub(/.*[{,]resource="/, "", resource); sub(/".*/, "", resource)
      sub_ = $0; sub(/.*subresource="/, "", sub_); sub(/".*/, "", sub_)
      code = $0; sub(/.*code="/, "", code); sub(/".*/, "", code)
      if (verb ~ /^(POST|PUT|PATCH|DELETE|APPLY)$/ && (resource == "pods" || resource == "events"))
        n[verb " " resource (sub_ == "" ? "" : "/" sub_) (code == "429" ? "-429" : "")] += $NF
    } END { for (k in n) print k, n[k] }' | sort
}
# The pod watch events the API server has sent so far to every watcher, and their bytes ("EVENTS BYTES"):
# each write to a pod goes to each of its watchers (kube-scheduler, the controller-manager, the extender, the
# stand-in plugins).
pod_watch_sent() {
  admin_get --max-time 5 "$MGPU_CLUSTER_APISERVER/metrics" |
    awk '/^apiserver_watch_events_total\{.*resource="pods"/ {n += $NF}
      /^apiserver_watch_events_sizes_sum\{.*resource="pods"/ {b += $NF} END {print n + 0, b + 0}'
}
# What api_writes counted between two of its answers ($1, $2): "VERB RESOURCE COUNT" for each that grew.
writes_since() {
  printf '%s\n--\n%s\n' "$1" "$2" | awk '$0 == "--" {after = 1; next} !after {n[$1 " " $2] = $3; next}
    $3 > n[$1 " " $2] {print $1, $2, $3 - n[$1 " " $2]}'
}
# TCP connections accepted on this machine so far (every process's: the phase's new connections, each a TLS
# handshake on both ends).
tcp_opens() { awk '/^Tcp:/ && ++n == 2 {print $7}' /proc/net/snmp; }
scheduled() {  # [kube-scheduler's metrics text, else fetched] [result: scheduled, unschedulable or error]
  local text=${1:-}
  [ -n "$text" ] || text=$(admin_get --max-time 5 "$scheduler_url/metrics" 2>/dev/null || true)
  metric "$text" "scheduler_schedule_attempts_total\\{.*result=\"${2:-scheduled}\".*\\}"
}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
# Each process's idle CPU (the nodes' leases, the controllers, the extender's lease) over one lease period
# (mgpu-api-nodes spreads the nodes' renewals over 20 s); with an argument, all but kube-scheduler's (paused).
measure_idle() {
  sample
  local start wall p
  start=$(now)
  sleep 20
  wall=$(echo "$(now) - $start" | bc)
  for p in "${processes[@]}"; do
    [ $# = 0 ] || [ "$p" != kube-scheduler ] || continue
    idle_rate[$p]=$(echo "scale=6; ($(ticks "$(pid_of "$p")") - ${t0[$p]}) / $wall" | bc)
  done
}
idle_text() { for p in "${processes[@]}"; do printf '%s %.1f  ' "$p" "$(echo "1000 * ${idle_rate[$p]} / $clk" | bc -l)"; done; }
sleep 10  # the API server takes in the nodes just created
measure_idle
# kube-scheduler's own start-up (a resume lists every node and pod): measured with nothing to schedule, taken
# out of each phase's figure for it.
cluster pause kube-scheduler >&2
cluster resume kube-scheduler >&2
sleep 5
scheduler_startup=$(echo "$(ticks "$(pid_of kube-scheduler)") - ${idle_rate[kube-scheduler]} * 5" | bc)
echo "idle CPU, ms/s: $(idle_text)" >&2
echo "kube-scheduler start-up: $(echo "scale=1; 1000 * $scheduler_startup / $clk" | bc) ms of CPU" >&2

threads_of() { awk '/Threads/ {print $2}' "/proc/$1/status"; }
api_port=${MGPU_CLUSTER_APISERVER##*:}
# The extender's open connections to the API server.
api_connections() { ss -tnpH state established "( dport = :$api_port )" | grep -c "pid=$extender_pid," || true; }
# The extender's RSS, heap and threads, once its RSS has not moved for 3 s (it hands freed memory back a
# second or two after a wave of deletions); given a thread count, a connection count and a time (the last
# bind's), first once it runs no more threads (up to 150 s: the HTTP workers a burst started end after a
# minute idle, WorkerPool) and holds no more API connections than those (up to 240 s), saying when the last
# of those closed.
extender_memory() {
  local last=-1 same=0 rss settled=""
  if [ $# -gt 0 ]; then
    for _ in $(seq 300); do
      [ "$(threads_of "$extender_pid")" -gt "$1" ] || break
      sleep 0.5
    done
    for _ in $(seq 480); do
      [ "$(api_connections)" -gt "$2" ] || break
      sleep 0.5
    done
    settled=", API connections back to $(api_connections) $(echo "scale=0; ($(now) - $3) / 1" | bc) s after the last bind"
  fi
  for _ in $(seq 120); do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$extender_pid/status")
    if [ "$rss" = "$last" ]; then same=$((same + 1)); else same=0; fi
    last=$rss
    [ $same -lt 6 ] || break
    sleep 0.5
  done
  # RSS split as the kernel counts it: anonymous pages (heap, stacks) and pages of files (code, libraries).
  local split
  split=$(awk '/RssAnon/ {a = $2} /RssFile/ {f = $2} END {printf "anon %s kB, file %s kB", a, f}' "/proc/$extender_pid/status")
  echo "RSS $rss kB ($split), heap $(metric "$(curl -sk "$extender_url/metrics")" mgpu_extender_heap_bytes) bytes, $(threads_of "$extender_pid") threads$settled"
}
# Once the API connections of its start-up lists have closed (90 s after their last use) too.
while [ "$(echo "$(now) < $extender_started + 95" | bc)" = 1 ]; do sleep 1; done
echo "extender memory with $nodes nodes and no pods: $(extender_memory), $(api_connections) API connections"
empty_threads=$(threads_of "$extender_pid")
empty_connections=$(api_connections)

# 4 GiB of mgpu-memory in the daemons' memoryUnitMiB devices, as the /mutate-memory webhook (not run here)
# would have rewritten the pods' 4096 MiB.
memory_unit=$(awk '/^ *memoryUnitMiB:/ {print $2}' "$state/daemons-config.yaml")
memory_unit=${memory_unit:-1}
pods_json() {  # mgpu count, plain count
  echo '{"apiVersion":"v1","kind":"List","items":['
  local i first=1
  for ((i = 0; i < $1 + $2; i++)); do
    local limits='' name=plain-$i
    if [ $i -lt "$1" ]; then
      limits="\"limits\":{\"mgpu.io/mgpu-core\":\"20\",\"mgpu.io/mgpu-memory\":\"$((4096 / memory_unit))\"},"
      name=gpu-$i
    fi
    [ $first = 1 ] || echo ,
    first=0
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","namespace":"default"},' "$name"
    printf '"spec":{"containers":[{"name":"main","image":"registry.example/infer:1","resources":{%s"requests":{"cpu":"100m","memory":"1Gi"}}}]}}' "$limits"
  done
  echo ']}'
}

# Pods/s of the pods whose name starts with $1, from their PodScheduled times (1 s resolution).
rate() {
  jq -r --arg p "$1" '[.items[] | select(.metadata.name | startswith($p)) | .status.conditions[]? |
      select(.type == "PodScheduled" and .status == "True") | .lastTransitionTime | fromdate] |
      if length == 0 then "-" else "\(length) pods, \(length / (max - min + 1) * 10 | round / 10) pods/s" end' \
    "$state/pods-after.json"
}

# With --profile: 2 s into the phase, a 6 s CPU profile of kube-scheduler and one of kube-apiserver, both at
# once, in the background (their pids in profilers).
profiled=0
profilers=()
profile_phase() {  # phase name
  profiled=$((profiled + 1))
  local name url
  for name in kube-scheduler kube-apiserver; do
    url=$MGPU_CLUSTER_APISERVER
    [ "$name" = kube-apiserver ] || url=$scheduler_url
    (
      sleep 2
      admin_get --max-time 30 "$url/debug/pprof/profile?seconds=6" -o "$profile/$profiled-$1-$name.pb.gz" ||
        echo "realcluster_bind.sh: no profile of $name in phase $1" >&2
    ) &
    profilers+=("$!")
  done
}

# The configuration cluster.sh wrote, and the same without its extenders and its percentageOfNodesToScore:
# kube-scheduler's default one.
cp "$state/scheduler-config.yaml" "$state/scheduler-config.mgpu.yaml"
awk '/^extenders:/ {skip = 1; next} /^[^ #-]/ {skip = 0} /percentageOfNodesToScore:/ {next} !skip' \
  "$state/scheduler-config.mgpu.yaml" >"$state/scheduler-config.default.yaml"
! grep -q '^ *- urlPrefix' "$state/scheduler-config.default.yaml" ||
  die "the scheduler configuration still names an extender once its extenders: list is taken out."

run_phase() {  # name, mgpu pods, plain pods[, default: kube-scheduler without mgpu's extenders]
  local phase=$1 gpu=$2 cpu=$3 config=${4:-mgpu}
  local total=$((gpu + cpu))
  cluster pause kube-scheduler >&2
  cp "$state/scheduler-config.$config.yaml" "$state/scheduler-config.yaml"  # read when it resumes
  pods_json "$gpu" "$cpu" >"$state/pods.json"
  kubectl create -f "$state/pods.json" >/dev/null
  sleep 3  # the watchers (extender, mgpu-api-nodes, controllers) take the created pods in
  measure_idle but-the-scheduler
  local before_metrics
  before_metrics=$(curl -sk "$extender_url/metrics")
  local writes_before opens_before
  writes_before=$(api_writes)
  watch_before=$(pod_watch_sent)
  opens_before=$(tcp_opens)
  sample
  local begin
  begin=$(now)
  cluster resume kube-scheduler >&2
  [ -z "$profile" ] || profile_phase "$phase"
  # Until kube-scheduler has placed every pod (its own counter: cheap, unlike listing the pods), then until
  # the API server shows every pod bound.
  while [ "$(scheduled)" -lt "$total" ]; do
    if [ "$(echo "$(now) - $begin > 900" | bc)" = 1 ]; then
      echo "realcluster_bind.sh: $phase: kube-scheduler placed only $(scheduled) of $total pods in 900 s" >&2
      break
    fi
    sleep 1
  done
  local unbound
  for _ in $(seq 60); do
    unbound=$(kubectl get pods -n default --field-selector spec.nodeName= -o name | wc -l)
    [ "$unbound" -gt 0 ] || break
    sleep 1
  done
  local bound_at
  bound_at=$(now)
  # With --delay-ms, until the stand-ins have confirmed every mgpu pod (a gpu-allocated PATCH each, --delay-ms
  # after its bind; they fall behind under load), up to 120 s.
  local confirmed=0
  for _ in $(seq 120); do
    [ "$delay_ms" -gt 0 ] || break
    confirmed=$(writes_since "$writes_before" "$(api_writes)" | awk '$1 " " $2 == "PATCH pods" {n = $3} END {print n + 0}')
    [ "$confirmed" -lt "$gpu" ] || break
    sleep 1
  done
  local end
  end=$(now)
  declare -A t1
  local p
  for p in "${processes[@]}"; do t1[$p]=$(ticks "$(pid_of "$p")"); done
  [ ${#profilers[@]} = 0 ] || wait "${profilers[@]}"
  profilers=()
  local writes_after opens_after
  writes_after=$(api_writes)
  watch_after=$(pod_watch_sent)
  opens_after=$(tcp_opens)
  local after_metrics
  after_metrics=$(curl -sk "$extender_url/metrics")
  kubectl get pods -n default -o json >"$state/pods-after.json"
  local wall
  wall=$(echo "$end - $begin" | bc)
  local confirm_text="no gpu-allocated written (each got its assignment)"
  [ "$delay_ms" -eq 0 ] || confirm_text="gpu-allocated confirmations ${delay_ms} ms late"
  local how="verbs $verbs"
  [ "$config" = mgpu ] || how="kube-scheduler's default configuration (no extender)"
  echo "== $phase: $gpu mgpu pods, $cpu plain pods; kube-scheduler client QPS $qps, $nodes nodes, $how, $confirm_text"
  echo "  idle CPU before it, ms/s: $(idle_text)"
  local confirmed_text=""
  [ "$delay_ms" -eq 0 ] || confirmed_text=", $confirmed confirmed $(echo "scale=1; ($end - $bound_at) / 1" | bc) s later"
  echo "  all bound in $(echo "scale=1; ($bound_at - $begin) / 1" | bc) s ($unbound left unbound)$confirmed_text; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  # kube-scheduler's tries (it starts afresh each phase): a pod tried more than once waited in its back-off.
  local tries
  tries=$(admin_get --max-time 5 "$scheduler_url/metrics" 2>/dev/null || true)
  echo "  kube-scheduler attempts: $(scheduled "$tries") scheduled, $(scheduled "$tries" unschedulable) unschedulable, $(scheduled "$tries" error) error"
  [ "$gpu" -eq 0 ] || echo "  mgpu pods:  $(rate gpu-)"
  [ "$cpu" -eq 0 ] || echo "  plain pods: $(rate plain-)"
  local sum=0 line="  CPU per pod, ms:"
  for p in "${processes[@]}"; do
    local used
    used=$(echo "${t1[$p]} - ${t0[$p]} - ${idle_rate[$p]} * $wall" | bc -l)
    [ "$p" != kube-scheduler ] || used=$(echo "${t1[$p]} - $scheduler_startup - ${idle_rate[$p]} * $wall" | bc -l)
    local ms
    ms=$(echo "1000 * $used / $clk / $total" | bc -l)
    sum=$(echo "$sum + $ms" | bc -l)
    line+=" $p $(printf '%.2f' "$ms"),"
  done
  echo "$line all $(printf '%.2f' "$sum")"
  echo "  API writes per pod (pods and events, every client): $(writes_since "$writes_before" "$writes_after" |
    awk -v total="$total" '{printf "%s%s %s %.2f", sep, $1, $2, $3 / total; sep = ", "; all += $3}
      END {printf "; all %.2f", all / total}')"
  echo "  pod watch events sent per pod: $(printf '%s %s' "$watch_before" "$watch_after" |
    awk -v total="$total" '{printf "%.2f, %.0f bytes", ($3 - $1) / total, ($4 - $2) / total}')"
  echo "  TCP connections opened on the machine: $((opens_after - opens_before))"
  delta() { echo "$(metric "$after_metrics" "$1") - $(metric "$before_metrics" "$1")" | bc; }
  if [ "$cpu" -gt 0 ] && [ "$config" = mgpu ]; then
    local cpu_calls cpu_sum
    cpu_calls=$(delta 'mgpu_extender_request_duration_seconds_count\{verb="choose-cpu-only"\}')
    cpu_sum=$(delta 'mgpu_extender_request_duration_seconds_sum\{verb="choose-cpu-only"\}')
    echo "  extender: $cpu_calls choose-cpu-only calls (mean $(echo "scale=2; 1000 * $cpu_sum / ($cpu_calls + ($cpu_calls == 0))" | bc) ms)"
  fi
  if [ "$gpu" -gt 0 ]; then
    local binds bind_sum
    binds=$(delta 'mgpu_extender_request_duration_seconds_count\{verb="bind"\}')
    bind_sum=$(delta 'mgpu_extender_request_duration_seconds_sum\{verb="bind"\}')
    echo "  extender: $(delta 'mgpu_extender_requests_total\{verb="(filter|choose)".*\}') filter or choose calls, $(delta 'mgpu_extender_requests_total\{verb="prioritize".*\}') prioritize, $binds binds (mean $(echo "scale=2; 1000 * $bind_sum / ($binds + ($binds == 0))" | bc) ms), $(delta 'mgpu_extender_bind_failures_total') answered with an error, $(delta 'mgpu_extender_requests_total\{verb="bind",code="(4|5)[0-9][0-9]"\}') with HTTP 4xx/5xx, $(delta 'mgpu_extender_http_connections_refused_total\{reason="busy"\}') connections refused busy"
    echo "  GPUAssigned events: $(delta 'mgpu_extender_events_total\{outcome="created"\}') created, $(delta 'mgpu_extender_events_total\{outcome="skipped"\}') skipped over the rate, $(delta 'mgpu_extender_events_total\{outcome="(dropped|failed)"\}') dropped or failed"
    local nodes_json
    nodes_json=$(curl -sk "$extender_url/v1/nodes")
    echo "  cards in use: $(echo "$nodes_json" | jq '[.nodes[].cards[] | select(.core > 0 or .reclaimedCore > 0 or .memoryMiB > 0)] | length'), over-committed: $(echo "$nodes_json" | jq '[.nodes[].cards[] | select(.core > 100 or .reclaimedCore > 100 or .memoryMiB > .capacityMiB)] | length')"
  fi
  echo "  extender memory with the pods: $(extender_memory)"
  kubectl delete pods -n default --all --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  until [ "$(kubectl get pods -n default -o name | wc -l)" = 0 ]; do sleep 1; done
  echo "  extender memory after deleting them: $(extender_memory "$empty_threads" "$empty_connections" "$bound_at")"
}

echo "real kube-scheduler $(kubectl version -o json | jq -r .serverVersion.gitVersion); extender $("$build/src/extender/mgpu-scheduler-extender" --version 2>/dev/null || echo "(no --version)")"
IFS=, read -ra wanted <<<"$phases"
for phase in "${wanted[@]}"; do
  case "$phase" in
    plain) run_phase plain 0 "$plain" ;;
    plain-default) run_phase plain-default 0 "$plain" default ;;
    mgpu) run_phase mgpu "$pods" 0 ;;
    mixed) run_phase mixed "$pods" "$plain" ;;
    *) die "unknown phase $phase (plain, plain-default, mgpu, mixed)" ;;
  esac
done
echo "extender RSS at the end: $(awk '/VmRSS/ {print $2, $3}' "/proc/$extender_pid/status")"
