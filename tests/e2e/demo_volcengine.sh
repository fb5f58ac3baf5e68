#!/usr/bin/env bash
# README's command for the Volcengine scenarios, as written (scripts/run.sh with the shipped
# deploy/examples/volcengine-config.yaml): it must exit 0 and show what tests/fixtures/seed-scenarios/README.md
# states: the two online and two offline replicas of online-offline.yaml, 30 percent and 4096 MiB each, all on
# one card of the 24 GiB A10 node (online 60/100, offline 60/100, 16384 MiB), each container told 4096 MiB.
#   tests/e2e/demo_volcengine.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() {
  echo "demo_volcengine: $1; the demo printed:" >&2
  cat "$out" >&2
  exit 1
}
MGPU_BUILD_DIR=$build_dir bash scripts/run.sh --config deploy/examples/volcengine-config.yaml \
  --workloads tests/fixtures/seed-scenarios/online-offline.yaml >"$out" 2>&1 || fail "the demo failed"
grep -q "^resource domain vke.volcengine.com, memoryUnitMiB 16$" "$out" || fail "not the Volcengine config"
for pod in infer-online-0 infer-online-1 train-offline-0 train-offline-1; do
  grep -Eq "^default/$pod +node-a10 +Running +[a-z]+: card 0 \((mgpu-core|reclaimed-mgpu-core) 30, mgpu-memory 4096 MiB\)$" \
    "$out" || fail "$pod is not on card 0 of node-a10 with 30 percent and 4096 MiB"
done
[ "$(grep -c "^      MGPU_MEMORY_MIB=4096$" "$out")" = 4 ] || fail "not every container is told 4096 MiB"
grep -Eq "^node-a10 +0 +NVIDIA A10 +Healthy +60/100 +60/100 +16384/24576 " "$out" ||
  fail "card 0 of node-a10 does not hold 60/100 online, 60/100 offline and 16384 MiB"
echo "demo_volcengine: the four replicas share card 0 of node-a10 at 4096 MiB each"
