#!/usr/bin/env bash
# Installs the Debian packages mgpu needs (only those missing), then configures and builds with Ninja.
# Usage: scripts/setup.sh [cmake target...]   (no target: build everything)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev libyaml-cpp-dev libcpp-httplib-dev
  libssl-dev zlib1g-dev libbrotli-dev libsimdjson-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev openssl
  prometheus  # promtool and prometheus, for the tests of /metrics and deploy/monitoring/
  clang libclang-rt-14-dev
)
# kubectl for the kustomize test (Debian's kubernetes-client); a kubectl already installed by another package
# owns /usr/bin/kubectl, and is used instead.
command -v kubectl >/dev/null || packages+=(kubernetes-client)
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

build_dir=${MGPU_BUILD_DIR:-build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}"
fi
jobs=$(nproc)
if [ $# -gt 0 ]; then
  cmake --build "$build_dir" -j "$jobs" --target "$@"
else
  cmake --build "$build_dir" -j "$jobs"
fi
