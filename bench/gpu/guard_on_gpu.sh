#!/usr/bin/env bash
# The guard's real-GPU figures (issue 26; bench/RESULTS.md section 4).
#
# The command for the second GPU run (from the repository root, on the GPU machine; at most 240 s of work):
#
#     bash bench/gpu/guard_on_gpu.sh --second
#
# (with the device tool: run(command="bash bench/gpu/guard_on_gpu.sh --second", timeout_s=300)). Results go
# to $OUT (the device tool's) or /tmp/mgpu-gpu. Everything, in under 7 minutes: `bash bench/gpu/guard_on_gpu.sh`.
# The third run (after run 2's rule changes; about 50 s of scenarios at 4 s each, 75 s at 12):
#
#     GUARD_GPU_SHARE_SECONDS=12 bash bench/gpu/guard_on_gpu.sh --third
#
# alone (the throughput reference), guaranteed-burst-share 30+70 and 20+30+50, fixed-share 10+90 (each
# measured GUARD_GPU_SHARE_SECONDS, default 4), offline at MGPU_RECLAIMED_CORE_PERCENT=40 (4 s), the report.
# Where NVML names one process per 200 ms sample (an H200), a 4 s share is counted in 20 samples of 5 points
# each: on the simulated card, with the rules of run 3, some share of 10+90, 30+70, 20+30+50 lands outside 2
# points in 29, 55, 81 percent of 4 s runs, and in 4, 12, 26 percent of 12 s runs (bench/RESULTS.md
# section 4).
# Without a GPU, `GUARD_GPU_DRY=<path of mgpu_guard_probe> bash bench/gpu/guard_on_gpu.sh --second` (or
# --third) walks the plan over the fake driver instead of PyTorch: each guarded process is the probe (one
# launch), so that every container token the plan makes is shown to be accepted by the guard; nothing is
# measured.
#
# Builds libmgpu-guard.so with the machine's g++ (no CMake, no NVIDIA headers: exactly src/guard/'s library
# files), then measures under it, each part on its own so that one failing part is recorded and the rest go
# on. The second run, in priority order, within GUARD_GPU_BUDGET_S (default 230 s):
#   shares   fixed-share and guaranteed-burst-share 30+70, 20+30+50, 10+90, then fixed-share 30 alone (bf16
#            8192^3 products, 4 s measured, after the unguarded alone rate every share is a percent of)
#   settle   how soon a share holds after a start (30 joins a 70) and after a neighbour's exit (a
#            guaranteed-burst 30 when its 70 neighbour exits)
#   cost     a launch-bound loop (one-element additions), unguarded, native-burst-share and fixed-share 100
#            (the share not the limit), two rounds, 2 s each
#   offline  offline held to MGPU_RECLAIMED_CORE_PERCENT=40 alone
#   smi      nvidia-smi's process list inside the container, and which NVML functions it binds
# The whole run adds the memory cap, NVML's view, CUDA graphs, training-step cost, offline release with a 10
# ms and the default window, and 100 processes starting at once.
# Every share is reported three ways (guard_report.py): the process's share of the card's time by NVML's
# per-process samples, read by an unguarded sampler (the judge, +-2 points); its throughput as a percent of
# the alone rate (a card busy a third of the time runs faster per busy second, and two contexts time-sliced
# lose some time switching, so this differs); and alone, its card time by CUDA events. A process whose stderr
# does not show the guard attached gets no share.
# Writes under $OUT: summary.txt (printed at the end), results.json, logs.tar.gz (every log and JSON line).
# Needs one NVIDIA GPU with its driver, nvidia-smi, g++, python3 with PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
mode=full
[ "${1:-}" = --second ] && mode=second
[ "${1:-}" = --third ] && mode=third
out=${OUT:-/tmp/mgpu-gpu}
mkdir -p "$out"
work=$(mktemp -d /tmp/mgpu-gpu-work.XXXXXX)
case $mode in
second) budget=${GUARD_GPU_BUDGET_S:-230} ;;
third) budget=${GUARD_GPU_BUDGET_S:-110} ;;
*) budget=${GUARD_GPU_BUDGET_S:-400} ;;
esac
share_secs=${GUARD_GPU_SHARE_SECONDS:-4}
if ! [[ $share_secs =~ ^[1-9][0-9]?$ ]]; then
  echo "guard_on_gpu.sh: GUARD_GPU_SHARE_SECONDS must be a whole number of seconds from 1 to 99, not '$share_secs'" >&2
  exit 2
fi
deadline=$((SECONDS + budget))
status=$work/status.txt
plan=$work/scenarios.jsonl
: >"$status"
: >"$plan"
torch_py=bench/gpu/guard_torch.py
lib=$work/libmgpu-guard.so
dry=${GUARD_GPU_DRY:-}

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

echo "== build ($mode run, $budget s of work)"
if ! g++ -std=c++20 -O2 -flto -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden \
  -foptimize-sibling-calls -Isrc \
  src/guard/{process,driver,cards,memory,compute,nvml,settings,budget,state}.cc -o "$lib" \
  -ldl -lpthread -static-libstdc++ -static-libgcc -Wl,--no-undefined -Wl,--exclude-libs,ALL 2>"$work/build.log"; then
  note "build: the guard did not build (build.log); nothing to measure"
  cat "$work/build.log"
fi
if [ "$mode" = full ]; then
  g++ -std=c++20 -O2 bench/gpu/startup_probe.cc -o "$work/startup_probe" -ldl 2>>"$work/build.log" ||
    note "build: startup_probe did not build"
fi
if [ -n "$dry" ]; then
  uuid=GPU-0a1b2c3d-0000-1111-2222-333344445555
  echo "dry run over the fake driver: $dry" >"$work/gpu.txt"
else
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >>"$work/gpu.txt" 2>&1
fi
cat "$work/gpu.txt"
export lib uuid work plan torch_py dry

# The container token of process I of scenario NAME: the guard takes only letters, digits, '-' and '_' (47 at
# most), and steps aside for anything else, so a '+' of a scenario's name becomes '_'.
token_of() {
  local t=${1//+/_}-$2
  printf '%s' "${t:0:47}"
}

# guarded TOKEN QOS PERCENT POLICY MIB -- command: one process of a container, as Allocate's environment makes
# it. MGPU_GUARD_RELEASE_MS passes through when set. A token the guard would refuse is refused here, loudly:
# the process would run unguarded. In a dry run the command is the fake driver's probe, launching once.
guarded() {
  local token=$1 qos=$2 pct=$3 policy=$4 mib=$5
  shift 6
  if ! [[ $token =~ ^[A-Za-z0-9_-]{1,47}$ ]]; then
    echo "guard_on_gpu.sh: token '$token' is not one the guard accepts; not run" >&2
    return 97
  fi
  local share=MGPU_CORE_PERCENT
  [ "$qos" = offline ] && share=MGPU_RECLAIMED_CORE_PERCENT
  local extra=()
  if [ -n "$dry" ]; then
    set -- "$dry" launch 1
    extra=(LD_LIBRARY_PATH="$(dirname "$dry")/fake" FAKE_CUDA_UUIDS="$uuid")
  fi
  env LD_PRELOAD="$lib" MGPU_VISIBLE_CARDS="$uuid" MGPU_CONTAINER_TOKEN="$token" MGPU_QOS_LEVEL="$qos" \
    "$share=$pct" MGPU_COMPUTE_POLICY="$policy" MGPU_MEMORY_MIB="$mib" MGPU_GUARD_STATE_DIR="$state" \
    MGPU_GUARD_LOG=1 "${extra[@]}" "$@"
}
# unguarded command...: the same process with no guard (nothing, in a dry run).
unguarded() { [ -n "$dry" ] || "$@"; }
fresh_state() { state=$(mktemp -d -p "$work" state.XXXX); }
# The wall-clock time processes started now should begin their measured work at (imports and CUDA first).
start_at() { python3 -c "import time; print(f'{time.time() + $1:.3f}')"; }

# scenario NAME KIND POLICY SECONDS SPEC...: processes that run matmul products together, each SPEC
# "share[:qos[:start-delay[:stop-after]]]" (share "-": unguarded), with the card sampled by an unguarded
# sampler (GPU-Util, SM clock, power, every process's NVML samples); the scenario is written to the plan for
# the report.
scenario() {
  local name=$1 kind=$2 policy=$3 secs=$4
  shift 4
  fresh_state
  local t0 stop_all
  t0=$(start_at 5)
  local pids=() procs="" i=0 sampler=""
  stop_all=$(python3 -c "print($secs + 7)")
  if [ -z "$dry" ]; then
    python3 bench/gpu/nvml_probe.py card --seconds "$stop_all" --log "$work/$name.util" \
      --samples "$work/$name.samples" &
    sampler=$!
  fi
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
      unguarded python3 "$torch_py" "${args[@]}" >"$work/$name-$i.json" 2>"$work/$name-$i.err" &
    else
      guarded "$(token_of "$name" "$i")" "$qos" "$share" "$policy" 16384 -- python3 "$torch_py" "${args[@]}" \
        >"$work/$name-$i.json" 2>"$work/$name-$i.err" &
    fi
    pids+=($!)
    procs+="${procs:+,}{\"share\":\"$share\",\"qos\":\"$qos\",\"delay\":$delay,\"stop\":\"${stop:-}\",\"log\":\"$name-$i.log\",\"err\":\"$name-$i.err\"}"
    i=$((i + 1))
  done
  for p in "${pids[@]}"; do wait "$p"; done
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
  fi
  echo "{\"name\":\"$name\",\"kind\":\"$kind\",\"policy\":\"$policy\",\"t0\":$t0,\"seconds\":$secs,\"procs\":[$procs],\"util\":\"$name.util\",\"samples\":\"$name.samples\"}" >>"$plan"
  tail -q -n 1 "$work/$name"-*.json 2>/dev/null
  return 0
}

# hold_start NAME MIB: a process of the container holding MIB MiB until hold_stop NAME (or 60 s); waits until
# it holds them.
hold_start() {
  guarded "$1" online 100 native-burst-share 4096 -- python3 "$torch_py" hold --mib "$2" --seconds 60 \
    --stop-file "$work/$1.stop" >"$work/$1.json" 2>"$work/$1.err" &
  echo $! >"$work/$1.pid"
  for _ in $(seq 200); do [ -s "$work/$1.json" ] && break; sleep 0.1; done
  cat "$work/$1.json"
}
hold_stop() {
  touch "$work/$1.stop"
  wait "$(cat "$work/$1.pid")" 2>/dev/null || true
}

memory() {
  fresh_state
  guarded mem1 online 100 native-burst-share 4096 -- python3 "$torch_py" mem | tee "$work/mem-guarded.json"
  hold_start hold 3072 >/dev/null
  guarded hold online 100 native-burst-share 4096 -- python3 "$torch_py" mem | tee "$work/mem-second-process.json"
  hold_stop hold
}

# What nvidia-smi shows inside the container (the holder's container, one process holding 1 GiB) and which NVML
# functions it binds (the dynamic linker's record of its lookups).
smi() {
  fresh_state
  hold_start nv 1024
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi \
    --query-gpu=memory.total,memory.used,memory.free,utilization.gpu --format=csv,noheader |
    tee "$work/nvidia-smi-query.txt"
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi --query-compute-apps=pid,used_memory \
    --format=csv,noheader | tee "$work/nvidia-smi-apps.txt"
  guarded nv online 100 native-burst-share 4096 -- nvidia-smi >"$work/nvidia-smi.txt" 2>&1
  unguarded nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader \
    >"$work/nvidia-smi-apps-unguarded.txt" 2>&1
  # Unguarded, so that the lookups are nvidia-smi's own (through the guard, its dlsym would be the caller).
  unguarded env LD_DEBUG=bindings nvidia-smi >/dev/null 2>"$work/nvidia-smi-bindings.txt"
  grep -o "normal symbol \`nvml[A-Za-z0-9_]*'" "$work/nvidia-smi-bindings.txt" | sort -u |
    tee "$work/nvidia-smi-nvml-symbols.txt" | grep -i "process" || true
  hold_stop nv
}

nvml() {
  fresh_state
  # One process of the container holds 1 GiB; the others look at the card through NVML.
  hold_start nv 1024
  guarded nv online 100 native-burst-share 4096 -- python3 bench/gpu/nvml_probe.py slice |
    tee "$work/nvml-slice.json"
  unguarded python3 bench/gpu/nvml_probe.py slice | tee "$work/nvml-slice-unguarded.json"
  # Inside a PyTorch process of the container that holds 512 MiB itself.
  guarded nv online 100 native-burst-share 4096 -- python3 "$torch_py" nvml --mib 512 | tee "$work/nvml-in-torch.json"
  hold_stop nv
}

offline_release() {
  local ms=$1 name=offline-release-$1
  fresh_state
  local t0
  t0=$(start_at 5)
  if [ "$ms" = default ]; then unset MGPU_GUARD_RELEASE_MS; else export MGPU_GUARD_RELEASE_MS=$ms; fi
  guarded "off-$ms" offline 100 native-burst-share 16384 -- python3 "$torch_py" matmul --warmup 0 --seconds 0 \
    --start-at "$t0" --stop-at "$(python3 -c "print($t0 + 7.5)")" --log "$work/$name-offline.log" \
    >"$work/$name-offline.json" 2>"$work/$name-offline.err" &
  local off=$!
  guarded "on-$ms" online 100 native-burst-share 16384 -- python3 "$torch_py" burst --on 1 --off 1 --cycles 3 \
    --start-at "$t0" --log "$work/$name-online.log" >"$work/$name-online.json" 2>"$work/$name-online.err"
  wait "$off"
  unset MGPU_GUARD_RELEASE_MS
  echo "{\"name\":\"$name\",\"kind\":\"release\",\"release_ms\":\"$ms\",\"t0\":$t0,\"online\":\"$name-online.log\",\"offline\":\"$name-offline.log\",\"errs\":[\"$name-online.err\",\"$name-offline.err\"]}" >>"$plan"
  cat "$work/$name-online.json" "$work/$name-offline.json"
}

# cost ROUND SECONDS MODES...: each mode (tiny: launch-bound; train: a training step) unguarded, under
# native-burst-share and under fixed-share 100 (budgets refilled from NVML, the share never the limit).
cost() {
  local round=$1 secs=$2
  shift 2
  for who in unguarded native fixed100; do
    fresh_state
    for mode in "$@"; do
      local f=$work/cost-$round-$who-$mode
      case $who in
      unguarded) unguarded python3 "$torch_py" "$mode" --seconds "$secs" ;;
      native) guarded "cost-$who" online 100 native-burst-share 16384 -- python3 "$torch_py" "$mode" --seconds "$secs" ;;
      fixed100) guarded "cost-$who" online 100 fixed-share 16384 -- python3 "$torch_py" "$mode" --seconds "$secs" ;;
      esac >"$f.json" 2>"$f.err"
      echo "$who $mode $(cat "$f.json")"
    done
  done
}

startup() {
  local who=$1
  fresh_state
  local t0=$SECONDS
  for i in $(seq 100); do
    if [ "$who" = unguarded ]; then
      unguarded "$work/startup_probe" >"$work/startup-$who-$i.txt" 2>&1 &
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

shares() {
  local policy=$1
  local short=${policy%%-*}
  part "$short-30+70" 12 scenario "$short-30+70" share "$policy" 4 30 70
  part "$short-20+30+50" 13 scenario "$short-20+30+50" share "$policy" 4 20 30 50
  part "$short-10+90" 12 scenario "$short-10+90" share "$policy" 4 10 90
}

if [ "$mode" = third ]; then
  part alone 12 scenario alone share none 4 -
  part guaranteed-30+70 $((share_secs + 8)) scenario guaranteed-30+70 share guaranteed-burst-share "$share_secs" 30 70
  part guaranteed-20+30+50 $((share_secs + 9)) scenario guaranteed-20+30+50 share guaranteed-burst-share \
    "$share_secs" 20 30 50
  part fixed-10+90 $((share_secs + 8)) scenario fixed-10+90 share fixed-share "$share_secs" 10 90
  part offline-percent 12 scenario offline-percent share native-burst-share 4 40:offline
elif [ "$mode" = second ]; then
  part alone 12 scenario alone share none 4 -
  shares fixed-share
  shares guaranteed-burst-share
  part fixed-30 12 scenario fixed-30 share fixed-share 4 30
  part settle-start 15 scenario settle-start settle fixed-share 8 70 30:online:3:8.5
  part settle-exit 15 scenario settle-exit settle guaranteed-burst-share 8 70:online:0:4 30
  part cost-1 20 cost 1 2 tiny
  part cost-2 20 cost 2 2 tiny
  part offline-percent 12 scenario offline-percent share native-burst-share 4 40:offline
  part smi 15 smi
else
  part memory 25 memory
  part nvml 30 nvml
  part smi 20 smi
  part alone 12 scenario alone share none 4 -
  for policy in fixed-share guaranteed-burst-share; do
    short=${policy%%-*}
    part "$short-30" 12 scenario "$short-30" share "$policy" 4 30
    shares "$policy"
  done
  part unguarded-pair 12 scenario unguarded-pair share none 4 - -
  part settle-start 15 scenario settle-start settle fixed-share 8 70 30:online:3:8.5
  part settle-exit 15 scenario settle-exit settle guaranteed-burst-share 8 70:online:0:4 30
  part offline-percent 12 scenario offline-percent share native-burst-share 4 40:offline
  part offline-release-10 14 offline_release 10
  part offline-release-default 14 offline_release default
  part graph-unguarded 12 scenario graph-unguarded graph none 4 -
  part graph-fixed-30 12 scenario graph-fixed-30 graph fixed-share 4 30
  part cost-1 45 cost 1 3 tiny train
  part startup-unguarded 40 startup unguarded
  part startup-guarded 40 startup guarded
  part cost-2 45 cost 2 3 tiny train
fi

echo "== report"
python3 bench/gpu/guard_report.py "$work" "$out" || note "report: failed"
tar -C "$work" -czf "$out/logs.tar.gz" --exclude='libmgpu-guard.so' --exclude='startup_probe' --exclude='state.*' . ||
  note "logs: tar failed"
[ -f "$out/summary.txt" ] || cp "$status" "$out/summary.txt"
cat "$out/summary.txt"
