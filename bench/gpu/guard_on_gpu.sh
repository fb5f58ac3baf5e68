#!/usr/bin/env bash
# The guard's real-GPU figures (bench/RESULTS.md, "Isolation on a real GPU"): builds libmgpu-guard.so with the
# machine's g++ (no CMake, no NVIDIA headers: exactly src/guard/), then runs bench/gpu/guard_torch.py under it.
# Needs one NVIDIA GPU, its driver, and python3 with PyTorch. Writes its logs under $OUT (default /tmp/mgpu-gpu).
# Usage: bash bench/gpu/guard_on_gpu.sh [seconds per compute run, default 10]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/mgpu-gpu}
secs=${1:-10}
mkdir -p "$out"
lib=$out/libmgpu-guard.so
g++ -std=c++20 -O2 -flto -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden -foptimize-sibling-calls -Isrc \
  src/guard/{process,driver,cards,memory,compute,settings,budget,state}.cc -o "$lib" \
  -ldl -lpthread -static-libstdc++ -static-libgcc -Wl,--no-undefined -Wl,--exclude-libs,ALL
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
state=$(mktemp -d)
py="python3 bench/gpu/guard_torch.py"

# guarded TOKEN QOS PERCENT POLICY MIB -- command: one container's process, as Allocate's environment makes it.
guarded() {
  local token=$1 qos=$2 pct=$3 policy=$4 mib=$5; shift 6
  local share=MGPU_CORE_PERCENT
  [ "$qos" = offline ] && share=MGPU_RECLAIMED_CORE_PERCENT
  env LD_PRELOAD="$lib" MGPU_VISIBLE_CARDS="$uuid" MGPU_CONTAINER_TOKEN="$token" MGPU_QOS_LEVEL="$qos" \
    "$share=$pct" MGPU_COMPUTE_POLICY="$policy" MGPU_MEMORY_MIB="$mib" MGPU_GUARD_STATE_DIR="$state" \
    MGPU_GUARD_LOG=1 "$@"
}
rate() { sed -n 's/.*"products_per_s": \([0-9.]*\).*/\1/p' "$1"; }

echo "== memory: 4096 MiB cap"
$py mem | tee "$out/mem-unguarded.json"
guarded mem1 online 100 native-burst-share 4096 -- $py mem | tee "$out/mem-guarded.json"
echo "== memory: two processes of one container share the cap (one holds 3072 MiB)"
guarded mem2 online 100 native-burst-share 4096 -- $py hold --mib 3072 --seconds 25 > "$out/hold.json" &
holder=$!
until [ -s "$out/hold.json" ]; do sleep 0.2; done
cat "$out/hold.json"
guarded mem2 online 100 native-burst-share 4096 -- $py mem | tee "$out/mem-second-process.json"
kill $holder; wait $holder 2>/dev/null || true

echo "== compute: ${secs} s of bf16 8192^3 products per run"
$py matmul --seconds "$secs" | tee "$out/alone.json"
guarded c30 online 30 fixed-share 16384 -- $py matmul --seconds "$secs" | tee "$out/fixed30-alone.json"
guarded c30 online 30 guaranteed-burst-share 16384 -- $py matmul --seconds "$secs" | tee "$out/burst30-alone.json"
guarded c30 online 30 native-burst-share 16384 -- $py matmul --seconds "$secs" | tee "$out/native30-alone.json"
guarded p30 online 30 fixed-share 16384 -- $py matmul --seconds "$secs" > "$out/fixed30-pair.json" &
a=$!
guarded p70 online 70 fixed-share 16384 -- $py matmul --seconds "$secs" > "$out/fixed70-pair.json"
wait $a
cat "$out/fixed30-pair.json" "$out/fixed70-pair.json"

echo "== online over offline: offline runs flat out; online is busy 1.5 s, idle 1.5 s, 4 times"
guarded on1 online 100 native-burst-share 16384 -- $py burst --log "$out/online-alone.log" | tee "$out/online-alone.json"
guarded off1 offline 100 native-burst-share 16384 -- \
  $py matmul --warmup 0 --seconds $((4 * 3 + 6)) --log "$out/offline.log" > "$out/offline.json" &
off=$!
sleep 3
guarded on1 online 100 native-burst-share 16384 -- $py burst --log "$out/online.log" | tee "$out/online.json"
wait $off
cat "$out/offline.json"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rate(name): return json.load(open(f"{out}/{name}.json"))["products_per_s"]
alone = rate("alone")
print("== share of the alone-on-the-card rate")
for name in ["fixed30-alone", "burst30-alone", "native30-alone", "fixed30-pair", "fixed70-pair"]:
    print(f"{name:16s} {rate(name):8.1f} products/s = {100 * rate(name) / alone:5.1f} percent")
busy = [tuple(map(float, l.split()[2:4])) for l in open(f"{out}/online.log") if l.startswith("# busy")]
off = [tuple(map(float, l.split())) for l in open(f"{out}/offline.log")]
def done_in(t0, t1):
    inside = [d for t, d in off if t0 <= t <= t1]
    return (inside[-1] - inside[0]) if len(inside) > 1 else 0
idle = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
held = sum(done_in(t0 + 0.05, t1) for t0, t1 in busy) / sum(t1 - t0 - 0.05 for t0, t1 in busy)
free = sum(done_in(t0, t1) for t0, t1 in idle) / sum(t1 - t0 for t0, t1 in idle)
lags = []
for _, t1 in busy:
    after = [t for t, _ in off if t > t1]
    if after: lags.append(1000 * (after[0] - t1))
first = []
for t0, _ in busy:
    during = [t for t, _ in off if t > t0]
    first.append(1000 * (during[0] - t0) if during else None)
on_alone = json.load(open(f"{out}/online-alone.json"))["products_per_s_busy"]
on_shared = json.load(open(f"{out}/online.json"))["products_per_s_busy"]
print(f"offline while online busy: {held:.1f} products/s; while online idle: {free:.1f} products/s")
print(f"online busy rate: alone {on_alone} products/s, next to offline {on_shared} "
      f"({100 * on_shared / on_alone:.1f} percent)")
print("offline's first product after online went idle (ms):", [round(x) for x in lags])
print("offline's first product after online started (ms):", [x and round(x) for x in first])
PY
