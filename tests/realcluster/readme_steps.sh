#!/usr/bin/env bash
# readme_steps: the commands of README's "Trying it on a real cluster" block, read from README.md and run
# one by one in one shell as an operator types them, with only this test's state folder, port base and build
# folder put in place of /tmp/mgpu-cluster, 26400 and build/. They must succeed, the example pod must print
# the environment of its share (30 percent, 4096 MiB) and `kubectl mgpu pods` must show its card; `down` runs
# even when a step fails. Exits 77 (ctest: Skipped) when there are no Kubernetes binaries.
# Usage: readme_steps.sh STATE_DIR PORT_BASE BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
state=$1 port_base=$2 build_dir=$3
cd "$repo"
mkdir -p "$state"
if ! bash scripts/cluster.sh binaries >/dev/null 2>"$state/binaries.err"; then
  echo "skipped: no Kubernetes binaries ($(cat "$state/binaries.err"))"
  exit 77
fi

steps=$(awk '/^## Trying it on a real cluster/ {on = 1; next} on && /^## / {exit}
             on && /^    / {print substr($0, 5); seen = 1; next} on && seen && !/^ *$/ {exit}' README.md)
[ -n "$steps" ] || { echo "readme_steps: README.md has no command block under 'Trying it on a real cluster'" >&2; exit 1; }
steps=${steps//\/tmp\/mgpu-cluster/$state}
steps=${steps//26400/$port_base}
steps=${steps//\$PWD\/build\//$build_dir/}
fail() {
  echo "readme_steps: $*" >&2
  bash scripts/cluster.sh logs --state-dir "$state" --lines 40 >&2 || true
  bash scripts/cluster.sh down --state-dir "$state" >/dev/null 2>&1 || true
  exit 1
}
echo "$steps" | grep -q "cluster.sh down" || fail "README's steps do not end with cluster.sh down"

# Every step but the last (down) in one shell, so that `source` and `export` carry over as they do for a reader;
# the output of the checked steps is kept.
out=$state/readme-steps.log
script=$(echo "$steps" | grep -v "cluster.sh down")
bash -euo pipefail -c "$script" >"$out" 2>&1 || { cat "$out" >&2; fail "a step of README failed (above)"; }
cat "$out"
grep -qx "MGPU_CORE_PERCENT=30" "$out" || fail "kubectl logs mgpu-hello does not show MGPU_CORE_PERCENT=30"
grep -qx "MGPU_MEMORY_MIB=4096" "$out" || fail "kubectl logs mgpu-hello does not show MGPU_MEMORY_MIB=4096"
grep -Eq "^default/mgpu-hello +localhost +[a-z]+ +0\.300 +hello +[0-9]+ +30 +0 +4096$" "$out" ||
  fail "kubectl mgpu pods does not show default/mgpu-hello with 30 percent and 4096 MiB of a card"
bash -euo pipefail -c "$(echo "$steps" | grep "cluster.sh down")" || fail "cluster.sh down failed"
echo "readme_steps: README's real-cluster steps ran as written"
