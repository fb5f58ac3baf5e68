#!/usr/bin/env bash
# cluster_smoke: scripts/cluster.sh brings a real cluster up (node Ready), runs a plain pod to Running with its
# output in the kubelet's logs, and brings it down with nothing left running or mounted and the bridge gone.
# Exits 77 (ctest: Skipped) when there are no Kubernetes binaries.
# Usage: cluster_smoke.sh STATE_DIR PORT_BASE
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
state=$1 port_base=$2
mkdir -p "$state"
cluster() { bash "$repo/scripts/cluster.sh" "$1" --state-dir "$state" --port-base "$port_base" "${@:2}"; }

set +e
cluster binaries >/dev/null 2>"$state/binaries.err"
rc=$?
set -e
if [ $rc = 3 ]; then
  echo "skipped: no Kubernetes binaries ($(cat "$state/binaries.err"))"
  exit 77
fi
[ $rc = 0 ] || { cat "$state/binaries.err"; exit 1; }

fail() {
  echo "cluster_smoke: $*" >&2
  cluster logs --lines 40 >&2 || true
  exit 1
}
trap 'cluster down >/dev/null 2>&1 || true' EXIT
cluster up || fail "cluster.sh up failed"
source "$state/env"
kubectl() { "$MGPU_K8S_BIN/kubectl" "$@"; }
kubectl wait --for=condition=Ready node/localhost --timeout=10s >/dev/null || fail "node localhost is not Ready"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/busybox:mgpu
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo smoke pod \$(hostname) is running; sleep 3600"]
YAML
kubectl wait --for=condition=Ready pod/smoke --timeout=60s >/dev/null || fail "pod smoke is not Running"
[ "$(kubectl get pod smoke -o jsonpath='{.status.phase}')" = Running ] || fail "pod smoke is not Running"
for _ in $(seq 50); do
  [ "$(kubectl logs smoke 2>/dev/null)" = "smoke pod smoke is running" ] && break
  sleep 0.1
done
[ "$(kubectl logs smoke)" = "smoke pod smoke is running" ] || fail "pod smoke's log is '$(kubectl logs smoke)'"
cluster status >/dev/null || fail "a component stopped: $(cluster status)"

trap - EXIT
cluster down || fail "cluster.sh down failed"
left=$(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo)
[ -z "$left" ] || fail "still mounted after down: $left"
for f in "$state"/pids/*; do
  [ -e "$f" ] || continue
  fail "$(basename "$f") still has a pid file after down"
done
for proc in /proc/[0-9]*; do
  command_line=$({ tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null || true)
  case "$command_line" in
    *"$state/"*) [ "${proc#/proc/}" = $$ ] || fail "process ${proc#/proc/} still runs from $state: $command_line" ;;
  esac
done
! ip link show mgpu-cni0 >/dev/null 2>&1 || fail "the bridge mgpu-cni0 is still there after down"
echo "cluster_smoke: up, node Ready, a plain pod Running, down: nothing left"
