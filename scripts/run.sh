#!/usr/bin/env bash
# Sets up, builds and runs the main job on its embedded default: a local mgpu cluster in one process (fake API
# server, the scheduler extender, a device plugin and a kubelet per sample node, a kube-scheduler stand-in)
# that schedules and admits the example workloads of deploy/examples/ and prints where they landed, each
# container's environment and `kubectl mgpu nodes`. Extra arguments go to mgpu-demo (e.g. --keep-running).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh mgpu-demo kubectl-mgpu
exec "${MGPU_BUILD_DIR:-build}/src/tools/mgpu-demo" --config deploy/examples/demo-config.yaml \
  --nodes deploy/examples/nodes.yaml --workloads deploy/examples/workloads.yaml "$@"
