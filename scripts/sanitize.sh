#!/usr/bin/env bash
# Builds and runs the tests under sanitizers, each kind in its own build directory, with clang:
#   asan:  the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan). The same build
#          holds the libFuzzer targets of fuzz/ (MGPU_FUZZ=ON), so scripts/fuzz.sh compiles nothing more.
#   tsan:  the concurrent tests under ThreadSanitizer (build-tsan): the extender's integration tests, the
#          end-to-end tests, the device plugin's daemon tests, the API client and its informers, the HTTP
#          server, the cluster cache, and common's unit tests (the background thread among them).
#   asan-build: only configure and build build-asan (what scripts/fuzz.sh needs).
# src/guard is built without sanitizers in both (CMakeLists.txt, MGPU_SANITIZE): libmgpu-guard.so and its
# fake driver are preloaded into uninstrumented programs; its tests run, uninstrumented, in the asan stage.
# Any report fails the run (halt_on_error).
# Usage: scripts/sanitize.sh [asan|tsan|asan-build]...   (none: asan and tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
jobs=$(nproc)
asan_dir=${MGPU_ASAN_BUILD_DIR:-build-asan}
tsan_dir=${MGPU_TSAN_BUILD_DIR:-build-tsan}
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"

MGPU_SETUP=ci bash scripts/setup.sh --packages-only  # clang and its sanitizer runtimes

# Optimised lightly, with line tables only: a sanitizer finds the same faults at -O1, and these builds are
# for finding faults, not for speed (half the compile time of -O2 -g). Test code (MGPU_TEST_COMPILE_OPTIONS)
# at -O0 under ASan, where it runs quickly enough; at -O1 under TSan, whose -O0 slows the timing-sensitive
# integration tests most.
configure() {  # build dir, test code's optimisation, cmake options...
  local dir=$1 test_opt=$2
  shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja "${launcher[@]}" -DCMAKE_CXX_COMPILER=clang++ -DMGPU_BUILD_BENCH=OFF \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
      "-DMGPU_TEST_COMPILE_OPTIONS=$test_opt;-gline-tables-only" "$@"
  fi
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    asan | asan-build)
      configure "$asan_dir" -O0 -DMGPU_FUZZ=ON
      cmake --build "$asan_dir" -j "$jobs"
      if [ "$kind" = asan ]; then
        # The real-cluster tests run once, in test.sh's own stage: one kubelet per machine.
        ctest --test-dir "$asan_dir" --output-on-failure -j "$jobs" --timeout 900 -LE realcluster
      fi
      ;;
    tsan)
      configure "$tsan_dir" -O1 -DMGPU_SANITIZE=thread
      cmake --build "$tsan_dir" -j "$jobs" --target mgpu_extender_integration_test mgpu_e2e_test \
        mgpu_deviceplugin_integration_test mgpu_kube_test mgpu_http_test mgpu_cluster_test mgpu_common_test \
        mgpu-place
      # Every test of those programs (mgpu-place for its ctest over the examples; the others are not built
      # here, and demo_volcengine would build mgpu-demo) but PluginTest: its fakes record in a gRPC server
      # thread what the test reads once the call returns, ordered by gRPC's own synchronisation, which TSan
      # cannot see in Debian's uninstrumented libgrpc (scripts/tsan.supp).
      ctest --test-dir "$tsan_dir" --output-on-failure -j "$jobs" --timeout 900 -LE realcluster \
        -E "_NOT_BUILT\$|^PluginTest[.]|^demo_volcengine\$"
      ;;
    *)
      echo "sanitize: unknown kind $kind (asan, tsan or asan-build)" >&2
      exit 2
      ;;
  esac
done
