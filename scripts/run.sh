#!/usr/bin/env bash
# Sets up, builds and runs the main job on its embedded default: the shared allocator placing the example
# workloads of deploy/examples/ on two sample nodes, as the scheduler extender would.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh mgpu-place
exec "${MGPU_BUILD_DIR:-build}/src/tools/mgpu-place" --nodes deploy/examples/nodes.yaml \
  --pods deploy/examples/workloads.yaml "$@"
