#!/usr/bin/env bash
# Sets up, builds and runs every test. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir "${MGPU_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
