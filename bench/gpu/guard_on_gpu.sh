#!/usr/bin/env bash
# The guard's real-GPU figures (issue 26; bench/RESULTS.md section 4), in one run of under 7 minutes.
#
# The command (from the repository root, on the GPU machine; OUT is where the results go):
#
#     OUT=${OUT:-/tmp/mgpu-gpu} bash bench/gpu/guard_on_gpu.sh
#
# (with the device tool: run(command="bash bench/gpu/guard_on_gpu.sh", timeout_s=480)).
#
# Builds libmgpu-guard.so with the machine's g++ (no CMake, no NVIDIA headers: exactly src/guard/'s library
# files) and bench/gpu/startup_probe.cc, then measures under it, each part on its own so that one failing part
# is recorded and the rest go on:
#   memory   the 4 GiB cap under PyTorch, and a second process of the container beside one holding 3 GiB
#   nvml     NVML and nvidia-smi inside the container: memory total = the cap, used = its own, its processes
#   shares   fixed-share and guaranteed-burst-share alone (30), 30+70, 20+30+50, 10+90 (bf16 8192^3 products,
#            4 s measured), each process's share of the alone rate and the card's idle time (by products and
#            by NVML's GPU-Util), beside an unguarded pair for the card's own time-slicing cost
#   settle   how soon a share holds after a start (30 joins a 70) and after a neighbour's exit (a
#            guaranteed-burst 30 when its 70 neighbour exits)
#   offline  offline held to MGPU_RECLAIMED_CORE_PERCENT alone; held while online works and released after
#            it idles, with MGPU_GUARD_RELEASE_MS=10 and the default (100)
#   graphs   CUDA graph replays held to a 30 percent fixed share
#   cost     a launch-bound loop (one-element additions) and a training step, unguarded and guarded (the share
#            not the limit: native-burst-share, and fixed-share 100, which refills and reads NVML)
#   startup  100 processes starting at once on the card (cuInit, context, allocation, a graph launch),
#            unguarded and guarded
# Writes under $OUT: summary.txt (printed at the end), results.json, logs.tar.gz (every log and JSON line).
# Needs one NVIDIA GPU with its driver, nvidia-smi, g++, python3 with PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/mgpu-gpu}
mkdir -p "$out"
work=$(mktemp -d /tmp/mgpu-gpu-work.XXXXXX)
deadline=$((SECONDS + ${GUARD_GPU_BUDGET_S:-400}))  # leave room for the report inside 7 minutes
status=$work/status.txt
plan=$work/scenarios.jsonl
: >"$status"
: >"$plan"
torch_py=bench/gpu/guard_torch.py
lib=$work/libmgpu-guard.so

note() { echo "$*" | tee -a "$status"; }
# part NAME SECONDS FUNCTION [ARGS...]: runs FUNCTION when SECONDS are left, within twice that, and records
# how it ended; a failure is noted and the next part goes on.
part() {
  local name=$1 need=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < need)); then
    note "part $name: skipped, $left s left of the budget and it needs $need"
    return
  fi
  local start=$SECONDS
  local limit=$((2 * need < left ? 2 * need : left))
  echo "== $name (about $need s)"
  timeout --kill-after=5 "$limit" bash -c "$(declare -f); $*" 2>&1 | tee "$work/$name.out"
  local rc=$?
  note "part $name: rc=$rc in $((SECONDS - start)) s"
}

echo "== build"
if ! g++ -std=c++20 -O2 -flto -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden \
  -foptimize-sibling-calls -Isrc \
  src/guard/{process,driver,cards,memory,compute,nvml,settings,budget,state}.cc -o "$lib" \
  -ldl -lpthread -static-libstdc++ -static-libgcc -Wl,--no-undefined -Wl,--exclude-libs,ALL 2>"$work/build.log"; then
  note "build: the guard did not build (build.log); nothing to measure"
  cat "$work/build.log"
fi
g++ -std=c++20 -O2 bench/gpu/startup_probe.cc -o "$work/startup_probe" -ldl 2>>"$work/build.log" ||
  note "build: startup_probe did not build"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1
cat "$work/gpu.txt"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >>"$work/gpu.txt" 2>&1
export lib uuid work plan torch_py

# guarded TOKEN QOS PERCENT POLICY MIB -- command: one process of a container, as Allocate's environment makes
# it. MGPU_GUARD_RELEASE_MS passes through when set.
guarded() {
  local token=$1 qos=$2 pct=$3 policy=$4 mib=$5
  shift 6
  local share=MGPU_CORE_PERCENT
  [ "$qos" = offline ] && share=MGPU_RECLAIMED_CORE_PERCENT
  env LD_PRELOAD="$lib" MGPU_VISIBLE_CARDS="$uuid" MGPU_CONTAINER_TOKEN="$token" MGPU_QOS_LEVEL="$qos" \
    "$share=$pct" MGPU_COMPUTE_POLICY="$policy" MGPU_MEMORY_MIB="$mib" MGPU_GUARD_STATE_DIR="$state" \
    MGPU_GUARD_LOG=1 "$@"
}
fresh_state() { state=$(mktemp -d -p "$work" state.XXXX); }
# The wall-clock time processes started now should begin their measured work at (imports and CUDA first).
start_at() { python3 -c "import time; print(f'{time.time() + $1:.3f}')"; }

# scenario NAME KIND POLICY SECONDS SPEC...: processes that run matmul products together, each SPEC
# "share[:qos[:start-delay[:stop-after]]]" (share "-": unguarded), with the card's GPU-Util sampled; the
# scenario is written to the plan for the report.
scenario() {
  local name=$1 kind=$2 policy=$3 secs=$4
  shift 4
  fresh_state
  local t0
  t0=$(start_at 5)
  local pids=() procs="" i=0
  python3 bench/gpu/nvml_probe.py card --seconds $((secs + 7)) --log "$work/$name.util" &
  local sampler=$!
  for spec in "$@"; do
    IFS=: read -r share qos delay stop <<<"$spec"
    qos=${qos:-online}
    delay=${delay:-0}
    local begin stop_at=0
    begin=$(python3 -c "print(f'{$t0 + $delay:.3f}')")
    [ -n "${stop:-}" ] && stop_at=$(python3 -c "print(f'{$t0 + $stop:.3f}')")
    local args=(matmul --warmup 0.5 --seconds "$secs" --start-at "$begin" --stop-at "$stop_at"
      --log "$work/$name-$i.log")
    [ "$kind" = graph ] && args[0]=graph
    if [ "$share" = - ]; then
      python3 "$torch_py" "${args[@]}" >"$work/$name-$i.json" 2>"$work/$name-$i.err" &
    else
      guarded "$name-$i" "$qos" "$share" "$policy" 16384 -- python3 "$torch_py" "${args[@]}" \
        >"$work/$name-$i.json" 2>"$work/$name-$i.err" &
    fi
    pids+=($!)
    procs+="${procs:+,}{\"share\":\"$share\",\"qos\":\"$qos\",\"delay\":$delay,\"stop\":\"${stop:-}\",\"log\":\"$name-$i.log\"}"
    i=$((i + 1))
  done
  for p in "${pids[@]}"; do wait "$p"; done
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  echo "{\"name\":\"$name\",\"kind\":\"$kind\",\"policy\":\"$policy\",\"t0\":$t0,\"seconds\":$secs,\"procs\":[$procs],\"util\":\"$name.util\"}" >>"$plan"
  tail -q -n 1 "$work/$name"-*.json 2>/dev/null
}

memory() {
  fresh_state
  guarded mem1 online 100 native-burst-share 4096 -- python3 "$torch_py" mem | tee "$work/mem-guarded.json"
  guarded mem2 online 100 native-burst-share 4096 -- python3 "$torch_py" hold --mib 3072 --seconds 12 \
    >"$work/hold.json" 2>"$work/hold.err" &
  local holder=$!
  for _ in $(seq 100); do [ -s "$work/hold.json" ] && break; sleep 0.1; done
  cat "$work/hold.json"
  guarded mem2 online 100 native-burst-share 4096 -- python3 "$torch_py" mem | tee "$work/mem-second-process.json"
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
}

nvml() {
  fresh_state
  # One process of the container holds 1 GiB; the others look at the card through NVML.
  guarded nv online 100 native-burst-share 4096 -- python3 "$torch_py" hold --mib 1024 --seconds 20 \
    >"$work/nvml-hold.json" 2>"$work/nvml-hold.err" &
  local holder=$!
  for _ in $(seq 150); do [ -s "$work/nvml-hold.json" ] && break; sleep 0.1; done
  cat "$work/nvml-hold.json"
  guarded nv online 100 native-burst-share 4096 -- python3 bench/gpu/nvml_probe.py slice |
    tee "$work/nvml-slice.json"
  python3 bench/gpu/nvml_probe.py slice | tee "$work/nvml-slice-unguarded.json"
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi \
    --query-gpu=memory.total,memory.used,memory.free,utilization.gpu --format=csv,noheader |
    tee "$work/nvidia-smi-query.txt"
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi --query-compute-apps=pid,used_memory \
    --format=csv,noheader | tee "$work/nvidia-smi-apps.txt"
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi >"$work/nvidia-smi.txt" 2>&1
  nvidia-smi >"$work/nvidia-smi-unguarded.txt" 2>&1
  # Inside a PyTorch process of the container that holds 512 MiB itself.
  guarded nv online 100 native-burst-share 4096 -- python3 "$torch_py" nvml --mib 512 | tee "$work/nvml-in-torch.json"
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
}

offline_release() {
  local ms=$1 name=offline-release-$1
  fresh_state
  local t0
  t0=$(start_at 5)
  if [ "$ms" = default ]; then unset MGPU_GUARD_RELEASE_MS; else export MGPU_GUARD_RELEASE_MS=$ms; fi
  guarded off-$ms offline 100 native-burst-share 16384 -- python3 "$torch_py" matmul --warmup 0 --seconds 0 \
    --start-at "$t0" --stop-at "$(python3 -c "print($t0 + 7.5)")" --log "$work/$name-offline.log" \
    >"$work/$name-offline.json" 2>"$work/$name-offline.err" &
  local off=$!
  guarded on-$ms online 100 native-burst-share 16384 -- python3 "$torch_py" burst --on 1 --off 1 --cycles 3 \
    --start-at "$t0" --log "$work/$name-online.log" >"$work/$name-online.json" 2>"$work/$name-online.err"
  wait "$off"
  unset MGPU_GUARD_RELEASE_MS
  echo "{\"name\":\"$name\",\"kind\":\"release\",\"release_ms\":\"$ms\",\"t0\":$t0,\"online\":\"$name-online.log\",\"offline\":\"$name-offline.log\"}" >>"$plan"
  cat "$work/$name-online.json" "$work/$name-offline.json"
}

cost() {
  local round=$1
  for who in unguarded native fixed100; do
    fresh_state
    for mode in tiny train; do
      case $who in
      unguarded) python3 "$torch_py" "$mode" --seconds 3 ;;
      native) guarded cost online 100 native-burst-share 16384 -- python3 "$torch_py" "$mode" --seconds 3 ;;
      fixed100) guarded cost online 100 fixed-share 16384 -- python3 "$torch_py" "$mode" --seconds 3 ;;
      esac >"$work/cost-$round-$who-$mode.json" 2>"$work/cost-$round-$who-$mode.err"
      echo "$who $mode $(cat "$work/cost-$round-$who-$mode.json")"
    done
  done
}

startup() {
  local who=$1
  fresh_state
  local t0=$SECONDS
  for i in $(seq 100); do
    if [ "$who" = unguarded ]; then
      "$work/startup_probe" >"$work/startup-$who-$i.txt" 2>&1 &
    else
      # One container of 100 processes (a container record each would pass the state's 32).
      guarded start online 50 fixed-share 1024 -- "$work/startup_probe" >"$work/startup-$who-$i.txt" 2>&1 &
    fi
  done
  local started
  started=$(date +%s.%N)
  wait
  local ended
  ended=$(date +%s.%N)
  python3 -c "print(f'{$ended - $started:.2f}')" >"$work/startup-$who-wall.txt"
  echo "$who: 100 processes in $(cat "$work/startup-$who-wall.txt") s ($((SECONDS - t0)) s)"
}

part memory 25 memory
part nvml 30 nvml
part alone 12 scenario alone share none 4 -
for policy in fixed-share guaranteed-burst-share; do
  short=${policy%%-*}
  part "$short-30" 12 scenario "$short-30" share "$policy" 4 30
  part "$short-30+70" 12 scenario "$short-30+70" share "$policy" 4 30 70
  part "$short-20+30+50" 13 scenario "$short-20+30+50" share "$policy" 4 20 30 50
  part "$short-10+90" 12 scenario "$short-10+90" share "$policy" 4 10 90
done
part unguarded-pair 12 scenario unguarded-pair share none 4 - -
part settle-start 14 scenario settle-start settle fixed-share 8 70 30:online:3:8.5
part settle-exit 14 scenario settle-exit settle guaranteed-burst-share 8 70:online:0:4 30
part offline-percent 12 scenario offline-percent share native-burst-share 4 40:offline
part offline-release-10 14 offline_release 10
part offline-release-default 14 offline_release default
part graph-unguarded 12 scenario graph-unguarded graph none 4 -
part graph-fixed-30 12 scenario graph-fixed-30 graph fixed-share 4 30
part cost-1 45 cost 1
part startup-unguarded 40 startup unguarded
part startup-guarded 40 startup guarded
part cost-2 45 cost 2

echo "== report"
python3 bench/gpu/guard_report.py "$work" "$out" || note "report: failed"
cp "$status" "$work/status-copy.txt" 2>/dev/null
tar -C "$work" -czf "$out/logs.tar.gz" --exclude='libmgpu-guard.so' --exclude='startup_probe' --exclude='state.*' . ||
  note "logs: tar failed"
[ -f "$out/summary.txt" ] || cp "$status" "$out/summary.txt"
cat "$out/summary.txt"
