#!/usr/bin/env bash
# Sets up, builds and runs every test (the real-cluster tests as a stage of their own, after the others: a real
# kube-apiserver, kube-scheduler, kubelet and containerd from ../shared/k8s/ with mgpu deployed from deploy/;
# Skipped without those binaries; each failing test prints every component's last lines), then the
# hardening stages: the whole suite under ASan+UBSan, the
# concurrent tests under TSan (scripts/sanitize.sh) and each fuzz target for 15 s (scripts/fuzz.sh). Exits
# non-zero when any of them fails. MGPU_HARDENING=0 skips the hardening stages.
# Time per stage on the 2-core x86-64 Debian 12 VM, cold ccache, while three other builds shared the cores
# (bench/RESULTS.md, section 5; each stage prints its own time): asan ~26 min to build (clang, every target
# and the fuzz targets) + 45 s of tests; tsan ~13 min to build four test programs + 70 s of tests; fuzz
# 170 s. About 45 min on top of the plain build and ctest, inside CI's 90 minutes but not by a wide margin
# on a cold cache; with ccache kept between runs the builds take a fraction of that.
set -euo pipefail
cd "$(dirname "$0")/.."
stage() {  # name, command...
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: stage $name took $((SECONDS - start)) s"
}
stage build bash scripts/setup.sh
stage ctest ctest --test-dir "${MGPU_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" -LE realcluster "$@"
# Real cluster (tests/realcluster/): cluster_smoke and the end-to-end suite, one at a time (one kubelet per
# machine). On the 2-core VM: about 2.5 min warm (test images 5 s, each cluster up 30 s, mgpu deployed 15 s),
# the same cold once the binaries are unpacked (12 s, once per machine, into ~/.cache/mgpu-k8s).
stage realcluster ctest --test-dir "${MGPU_BUILD_DIR:-build}" --output-on-failure -L realcluster "$@"
if [ "${MGPU_HARDENING:-1}" != 0 ]; then
  stage asan bash scripts/sanitize.sh asan
  stage tsan bash scripts/sanitize.sh tsan
  stage fuzz env MGPU_FUZZ_SEED=1 bash scripts/fuzz.sh 15
fi
