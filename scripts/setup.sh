#!/usr/bin/env bash
# Installs the Debian packages mgpu needs (only those missing), then configures and builds with Ninja.
# Usage: scripts/setup.sh [--packages-only] [cmake target...]   (no target: build everything)
#   --packages-only: install the missing packages and stop (the images' build stage caches that layer apart
#   from the sources).
#   MGPU_SETUP=daemons: only what building the daemons needs, configured without tests and benchmarks (the
#   images' build stage, deploy/docker/); unset or "all": everything the tests and benchmarks need;
#   "ci": also clang for the sanitizer and fuzz stages of scripts/test.sh --all.
set -euo pipefail
cd "$(dirname "$0")/.."

setup=${MGPU_SETUP:-all}
if [ "$setup" != all ] && [ "$setup" != daemons ] && [ "$setup" != ci ]; then
  echo "setup: MGPU_SETUP must be all, ci or daemons, not '$setup'" >&2
  exit 2
fi
packages_only=0
if [ "${1:-}" = --packages-only ]; then
  packages_only=1
  shift
fi

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev libyaml-cpp-dev libcpp-httplib-dev
  libssl-dev zlib1g-dev libbrotli-dev libsimdjson-dev libnghttp2-dev
)
cmake_options=()
if [ "$setup" != daemons ]; then
  packages+=(
    libgtest-dev libgmock-dev googletest libbenchmark-dev openssl
    prometheus  # promtool and prometheus, for the tests of /metrics and deploy/monitoring/
    # The real cluster of the tests (scripts/cluster.sh; its Kubernetes binaries come from ../shared/k8s/):
    # etcd, runc, the CNI plugins, busybox for the test images, and the tools the script calls.
    etcd-server runc containernetworking-plugins busybox-static iproute2 curl util-linux jq bc
  )
  # clang for the sanitizer and fuzz stages of scripts/test.sh --all.
  [ "$setup" != ci ] || packages+=(clang libclang-rt-14-dev)
  # kubectl (Debian's kubernetes-client; a kubectl already installed by another package owns /usr/bin/kubectl,
  # and is used instead). Debian 12's is 1.20, too old to render deploy/ (kustomize 2.1 or later): the deploy
  # tests prefer the v1.36.2 kubectl of ../shared/k8s/, and say they are skipped when they have neither.
  command -v kubectl >/dev/null || packages+=(kubernetes-client)
else
  # GoogleTest and Google Benchmark are not installed: their CMake packages are required only with these on.
  cmake_options=(-DMGPU_BUILD_TESTS=OFF -DMGPU_BUILD_BENCH=OFF)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "$packages_only" -eq 0 ] || exit 0

build_dir=${MGPU_BUILD_DIR:-build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" "${cmake_options[@]}"
fi
jobs=$(nproc)
if [ $# -gt 0 ]; then
  cmake --build "$build_dir" -j "$jobs" --target "$@"
else
  cmake --build "$build_dir" -j "$jobs"
fi
