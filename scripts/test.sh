#!/usr/bin/env bash
# Sets up, builds and runs the tests. Exits non-zero when any stage fails; each stage prints its own time.
#   scripts/test.sh [ctest arguments...]        the README's test command: installs what is missing, builds
#                                               everything (gcc) and runs ctest but the real-cluster tests;
#                                               the newcomer's answer.
#   scripts/test.sh --all [ctest arguments...]  what CI runs (.ci/run): the above, then
#     realcluster  tests/realcluster/ one at a time (one kubelet per machine): a real v1.36.2 kube-apiserver,
#                  kube-scheduler, kubelet and containerd from ../shared/k8s/ with mgpu deployed from deploy/
#                  (Skipped without those binaries; a failing test prints every component's last lines);
#     asan         the whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer;
#     tsan         the concurrent tests under ThreadSanitizer (scripts/sanitize.sh);
#     fuzz         each libFuzzer target for 15 s (scripts/fuzz.sh).
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
build_dir=${MGPU_BUILD_DIR:-build}
stage ctest ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -LE realcluster "$@"
if [ "$all" = 1 ]; then
  stage realcluster ctest --test-dir "$build_dir" --output-on-failure -L realcluster "$@"
  stage asan bash scripts/sanitize.sh asan
  stage tsan bash scripts/sanitize.sh tsan
  stage fuzz env MGPU_FUZZ_SEED=1 bash scripts/fuzz.sh 15
fi
