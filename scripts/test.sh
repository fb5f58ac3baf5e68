#!/usr/bin/env bash
# Sets up, builds and runs the tests. Exits non-zero when any stage fails; each stage prints its own time.
#   scripts/test.sh [ctest arguments...]        the README's test command: installs what is missing, builds
#                                               everything (gcc) and runs ctest; the newcomer's answer.
#   scripts/test.sh --all [ctest arguments...]  what CI runs (.ci/run): the above, then the hardening stages:
#                                               the whole suite again under AddressSanitizer +
#                                               UndefinedBehaviorSanitizer, the concurrent tests under
#                                               ThreadSanitizer (scripts/sanitize.sh) and each fuzz target for
#                                               15 s (scripts/fuzz.sh).
# Stage times, cold and warm ccache, on the 2-core VM: bench/RESULTS.md section 6.
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [ "${1:-}" = --all ]; then
  all=1
  shift
fi
stage() {  # name, command...
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: stage $name took $((SECONDS - start)) s"
}
if [ "$all" = 1 ]; then
  stage packages env MGPU_SETUP=ci bash scripts/setup.sh --packages-only
fi
stage build bash scripts/setup.sh
stage ctest ctest --test-dir "${MGPU_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
if [ "$all" = 1 ]; then
  stage asan bash scripts/sanitize.sh asan
  stage tsan bash scripts/sanitize.sh tsan
  stage fuzz env MGPU_FUZZ_SEED=1 bash scripts/fuzz.sh 15
fi
