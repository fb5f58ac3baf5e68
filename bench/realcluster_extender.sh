# shellcheck shell=bash
# Sourced by bench/realcluster_*.sh once scripts/cluster.sh is up and its env sourced: mgpu-scheduler-extender
# on the host as its pod runs, with deploy/base's config.yaml, listening and serving TLS where the cluster's
# kube-scheduler expects it, as deploy/extender's ServiceAccount (with that RBAC, by a token of it, as by its
# projected token: the API server caches a token's authentication; the admin's client certificate, used
# before, had its chain verified on every request, bench/RESULTS.md section 5), with the malloc tunable its
# image sets (deploy/docker/extender.Dockerfile).
#   start_extender REPO BUILD STATE   sets extender_pid and extender_url; returns once it is ready
#   stop_extender                     ends it (by its pid) and waits for it
# Needs the caller's die() and kubectl().
# The daemons' config.yaml as deploy/base's ConfigMap holds it, to standard output: the extender's, and the one
# the API-only nodes publish their inventory under (cluster.sh --api-node-config), so both count mgpu-memory
# in the same memoryUnitMiB.
daemons_config() {
  awk '/^  config.yaml: \|/ {on = 1; next} on && /^    / {print substr($0, 5); next} on && !/^ *$/ {exit}
       on {print ""}' "$1/deploy/base/config.yaml"
}
start_extender() {
  local repo=$1 build=$2 state=$3
  kubectl get namespace mgpu-system >/dev/null 2>&1 || kubectl create namespace mgpu-system >/dev/null
  daemons_config "$repo" |
    sed -e "s|listenAddress: 0.0.0.0:12345|listenAddress: 127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT|" \
      -e "s|tlsCertFile: /etc/mgpu-tls/tls.crt|tlsCertFile: $state/extender-tls/tls.crt|" \
      -e "s|tlsKeyFile: /etc/mgpu-tls/tls.key|tlsKeyFile: $state/extender-tls/tls.key|" >"$state/extender.yaml"
  grep -q "listenAddress: 127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT" "$state/extender.yaml" ||
    die "deploy/base/config.yaml no longer has the listenAddress this script replaces."
  kubectl apply -f "$repo/deploy/extender/rbac.yaml" >/dev/null
  kubectl create token mgpu-scheduler-extender -n mgpu-system --duration 48h >"$state/extender.token"
  cat >"$state/extender.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: mgpu-test
  cluster: {server: "$MGPU_CLUSTER_APISERVER", certificate-authority: "$state/pki/ca.crt"}
users:
- name: mgpu-scheduler-extender
  user: {tokenFile: "$state/extender.token"}
contexts:
- name: mgpu-test
  context: {cluster: mgpu-test, user: mgpu-scheduler-extender}
current-context: mgpu-test
EOF
  GLIBC_TUNABLES=glibc.malloc.tcache_count=0 "$build/src/extender/mgpu-scheduler-extender" \
    --kubeconfig "$state/extender.kubeconfig" --config "$state/extender.yaml" >>"$state/logs/extender.log" 2>&1 &
  extender_pid=$!
  extender_url=https://127.0.0.1:$MGPU_CLUSTER_EXTENDER_PORT
  until curl -skf --max-time 1 "$extender_url/readyz" >/dev/null; do  # 503 until its informers are synced
    kill -0 "$extender_pid" 2>/dev/null || die "the extender exited: $(tail -5 "$state/logs/extender.log")"
    sleep 0.2
  done
}

stop_extender() {
  [ -n "${extender_pid:-}" ] || return 0
  kill "$extender_pid" 2>/dev/null || true
  wait "$extender_pid" 2>/dev/null || true
  extender_pid=""
}
