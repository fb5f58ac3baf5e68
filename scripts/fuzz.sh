#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer) in
# build-asan (scripts/sanitize.sh) and runs each for SECONDS (default 60) from its seed corpus
# fuzz/corpus/<target>/ and the inputs that once crashed it, fuzz/regressions/<target>/. Fails when any target finds a crash; the input
# is left in build-asan/findings/<target>/ (keep it under fuzz/regressions/ once fixed).
# MGPU_FUZZ_SEED: libFuzzer's -seed (default 0: a new random walk each run). CI (scripts/test.sh) sets 1, so that
# its walk is the one checked before landing and a run there never stops on a finding nobody has seen; open
# exploration is this script without the variable.
# Usage: scripts/fuzz.sh [SECONDS] [target...]   (no target: all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
# The ASan+UBSan build of scripts/sanitize.sh holds the fuzz targets too (MGPU_FUZZ=ON).
build_dir=${MGPU_ASAN_BUILD_DIR:-build-asan}
bash scripts/sanitize.sh asan-build

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for source in fuzz/*_fuzz.cc; do
    name=$(basename "$source" _fuzz.cc)
    targets+=("$name")
  done
fi
# One target: its regressions, then its run. Prints one line (and the crash's first lines); its exit status says
# whether it passed.
fuzz_one() {  # target
  local target=$1
  local corpus="$build_dir/corpus/$target"  # grows as the fuzzer learns; the seeds in the repo stay as they are
  local findings="$build_dir/findings/$target"
  rm -rf "$findings"
  mkdir -p "$corpus" "$findings"
  local seeds=() dir
  for dir in "fuzz/corpus/$target" "fuzz/regressions/$target"; do
    [ -d "$dir" ] && seeds+=("$dir")
  done
  # The regressions first, one by one: each must pass as it is.
  if [ -d "fuzz/regressions/$target" ] && [ -n "$(ls -A "fuzz/regressions/$target")" ]; then
    if ! "$build_dir/fuzz/fuzz_$target" fuzz/regressions/"$target"/* >"$findings/regressions.log" 2>&1; then
      echo "fuzz: $target fails one of its regression inputs (see $findings/regressions.log)"
      return 1
    fi
  fi
  local log="$findings/run.log"
  if "$build_dir/fuzz/fuzz_$target" -seed="${MGPU_FUZZ_SEED:-0}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $target ran $runs inputs in ${seconds}s, no crash"
  else
    echo "fuzz: $target found a crash; input and log in $findings/"
    grep -m 5 -E 'ERROR|SUMMARY|property does not hold' "$log" || tail -5 "$log"
    return 1
  fi
}

# As many targets at once as there are cores (each fuzzer is one process on one core); their lines in order.
mkdir -p "$build_dir/findings"
failed=()
jobs=$(nproc)
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for target in "${batch[@]}"; do
    fuzz_one "$target" >"$build_dir/findings/$target.line" 2>&1 &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    wait "${pids[$i]}" || failed+=("${batch[$i]}")
    cat "$build_dir/findings/${batch[$i]}.line"
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
