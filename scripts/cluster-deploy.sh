#!/usr/bin/env bash
# mgpu installed on the cluster of scripts/cluster.sh (with its kubelet) the way an operator installs it
# (README, "Trying it on a real cluster"); `scripts/cluster.sh deploy` runs it.
#   1. The images: scripts/test-images.sh mgpu (thin images of this build's binaries, named as deploy/ names
#      them) and the workload image, imported into the node's containerd with its own `ctr`.
#   2. `kubectl apply -k` of STATE/deploy/, a kustomization that takes deploy/overlays/static-test-node as it
#      is and sets only what this machine names: the node's cards (--inventory of cluster.sh), the API
#      server's port, the daemons' ports on the node's address, the kubelet's --root-dir (its pod-resources
#      folder) and the guard's host folder under the state folder.
#   3. scripts/certs.sh --keep --apply: the extender's TLS Secret and the webhook's caBundle, with the CA that
#      kube-scheduler was started with.
#   4. Waits until the extender is ready, the plugin has registered (the node advertises the three mgpu
#      resources) and the webhook answers.
# Usage: scripts/cluster-deploy.sh STATE_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
state=$1
die() {
  echo "cluster-deploy.sh: $*" >&2
  exit 1
}
[ -f "$state/env" ] || die "no cluster in $state (scripts/cluster.sh up first)."
# shellcheck source=/dev/null
source "$state/env"
[ "$MGPU_CLUSTER_KUBELET" = 1 ] || die "the cluster in $state has no kubelet to deploy to."
export PATH="$MGPU_K8S_BIN:$PATH"  # the cluster's own kubectl, for certs.sh too
ctr() { "$MGPU_K8S_BIN/ctr" --address "$state/containerd/containerd.sock" -n k8s.io "$@"; }

start=$SECONDS
for tar in $(bash "$repo/scripts/test-images.sh" mgpu); do
  ctr images import "$tar" >/dev/null 2>"$state/logs/ctr-import.log" ||
    die "ctr could not import $tar: $(tail -3 "$state/logs/ctr-import.log")"
done
echo "cluster-deploy.sh: images imported ($((SECONDS - start)) s)" >&2

apiserver_port=${MGPU_CLUSTER_APISERVER##*:}
node_ip=$MGPU_CLUSTER_NODE_IP
layer=$state/deploy
rm -rf "$layer"
mkdir -p "$layer"
cp "$MGPU_CLUSTER_INVENTORY" "$layer/inventory.yaml"
sed -e "s|metricsAddress: 0.0.0.0:9400|metricsAddress: $node_ip:$MGPU_CLUSTER_PLUGIN_METRICS_PORT|" \
  -e "s|listenAddress: 0.0.0.0:12345|listenAddress: $node_ip:$MGPU_CLUSTER_EXTENDER_PORT|" \
  -e "s|guardLibraryPath: /var/lib/mgpu/|guardLibraryPath: $state/mgpu/|" \
  -e "s|guardStateDirectory: /var/lib/mgpu/|guardStateDirectory: $state/mgpu/|" \
  -e "s|podResourcesPollMs: 1000|podResourcesPollMs: 200|" \
  "$repo/deploy/overlays/static-test-node/config.yaml" >"$layer/config.yaml"
for want in "metricsAddress: $node_ip" "listenAddress: $node_ip" "guardLibraryPath: $state/mgpu/" \
  "guardStateDirectory: $state/mgpu/"; do
  grep -q "$want" "$layer/config.yaml" ||
    die "deploy/overlays/static-test-node/config.yaml no longer has the line this script sets to '$want'."
done
cat >"$layer/kustomization.yaml" <<EOF
# Written by scripts/cluster-deploy.sh: deploy/overlays/static-test-node with this machine's names.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$layer" "$repo/deploy/overlays/static-test-node")
generatorOptions:
  disableNameSuffixHash: true
  labels:
    app.kubernetes.io/part-of: mgpu
configMapGenerator:
  - name: mgpu-config
    namespace: mgpu-system
    behavior: replace
    files: [config.yaml]
  - name: mgpu-static-inventory
    namespace: mgpu-system
    behavior: replace
    files: [inventory.yaml]
patches:
  - target: {kind: DaemonSet, name: mgpu-device-plugin}
    patch: |-
      - {op: test, path: /spec/template/spec/containers/0/ports/0/name, value: metrics}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: $MGPU_CLUSTER_PLUGIN_METRICS_PORT}
      - {op: test, path: /spec/template/spec/containers/0/volumeMounts/4/name, value: mgpu-guard}
      - {op: replace, path: /spec/template/spec/containers/0/volumeMounts/4/mountPath, value: $state/mgpu}
      - {op: test, path: /spec/template/spec/volumes/2/name, value: pod-resources}
      - {op: replace, path: /spec/template/spec/volumes/2/hostPath/path, value: $state/kubelet/pod-resources}
      - {op: test, path: /spec/template/spec/volumes/4/name, value: mgpu-guard}
      - {op: replace, path: /spec/template/spec/volumes/4/hostPath/path, value: $state/mgpu}
  - target: {kind: Deployment, name: mgpu-scheduler-extender}
    patch: |-
      - {op: test, path: /spec/template/spec/containers/0/ports/0/name, value: https}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: $MGPU_CLUSTER_EXTENDER_PORT}
  - patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: mgpu-device-plugin, namespace: mgpu-system}
      spec:
        template:
          spec:
            containers:
              - name: device-plugin
                env:
                  - {name: KUBERNETES_SERVICE_PORT, value: "$apiserver_port"}
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: mgpu-scheduler-extender, namespace: mgpu-system}
      spec:
        template:
          spec:
            containers:
              - name: extender
                env:
                  - {name: KUBERNETES_SERVICE_PORT, value: "$apiserver_port"}
EOF
kubectl kustomize "$layer" >"$layer/rendered.yaml" || die "kubectl kustomize $layer failed."
kubectl apply -k "$layer" >"$layer/apply.log" || die "kubectl apply -k $layer failed: $(tail -3 "$layer/apply.log")"
bash "$repo/scripts/certs.sh" --keep --out "$state/extender-tls" --apply >"$layer/certs.log" ||
  die "scripts/certs.sh --apply failed: $(tail -3 "$layer/certs.log")"
echo "cluster-deploy.sh: applied ($((SECONDS - start)) s)" >&2

kubectl -n mgpu-system rollout status deployment/mgpu-scheduler-extender --timeout=120s >&2 ||
  die "the extender did not become ready: $(kubectl -n mgpu-system describe pods -l app.kubernetes.io/name=mgpu-scheduler-extender | tail -15)"
kubectl -n mgpu-system rollout status daemonset/mgpu-device-plugin --timeout=120s >&2 ||
  die "the device plugin did not become ready: $(kubectl -n mgpu-system describe pods -l app.kubernetes.io/name=mgpu-device-plugin | tail -15)"
deadline=$((SECONDS + 60))
until [ -n "$(kubectl get node localhost -o jsonpath='{.status.allocatable.mgpu\.io/mgpu-core}')" ] &&
  [ -n "$(kubectl get node localhost -o jsonpath='{.metadata.annotations.mgpu\.io/gpu-inventory}')" ]; do
  [ $SECONDS -lt $deadline ] || die "node localhost does not advertise mgpu.io/mgpu-core or has no gpu-inventory."
  sleep 0.5
done
echo "cluster-deploy.sh: mgpu runs: extender ready, plugin registered ($((SECONDS - start)) s)" >&2
