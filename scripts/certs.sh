#!/usr/bin/env bash
# Makes the TLS set-up of mgpu-scheduler-extender with openssl, in one go: a CA, and a serving certificate
# signed by it for the extender's Service (<service>.<namespace>.svc and its longer and shorter DNS names),
# which kube-scheduler (enableHTTPS) and the API server (the admission webhook) both check.
# Writes into the output folder: ca.crt ca.key tls.crt tls.key, secret.yaml (the kubernetes.io/tls Secret
# mgpu-extender-tls the extender Deployment mounts, with ca.crt for the second scheduler) and caBundle (the
# base64 CA for the webhook configurations), and prints the caBundle.
# With --apply, also creates or replaces the Secret and sets the caBundle of every webhook of the
# Validating- and MutatingWebhookConfiguration mgpu-scheduler-extender (and, where deploy/dra/ is applied, of
# the Validating- and MutatingWebhookConfiguration mgpu-scheduler-extender-dra), with kubectl's current context.
# Replacement mode: copy ca.crt to /etc/kubernetes/mgpu/ca.crt on the control-plane nodes (the kube-scheduler
# config's tlsConfig.caFile).
# With --keep, a CA and certificate already in the output folder are kept (made only when missing), e.g. when a
# kube-scheduler already trusts that CA.
# Usage: scripts/certs.sh [--out DIR] [--namespace NS] [--service NAME] [--days N] [--keep] [--apply]
set -euo pipefail

out=mgpu-certs
namespace=mgpu-system
service=mgpu-scheduler-extender
days=825
apply=false
keep=false
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --namespace) namespace=$2; shift 2 ;;
    --service) service=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --apply) apply=true; shift ;;
    --keep) keep=true; shift ;;
    *) echo "certs.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "certs.sh: openssl is not installed" >&2; exit 1; }
mkdir -p "$out"
umask 077

if ! $keep || [ ! -f "$out/ca.crt" ] || [ ! -f "$out/tls.crt" ] || [ ! -f "$out/tls.key" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" -subj "/CN=mgpu-scheduler-extender CA" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$service.$namespace.svc" \
    -keyout "$out/tls.key" -out "$out/tls.csr" 2>/dev/null
  cat >"$out/tls.ext" <<EXT
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$service, DNS:$service.$namespace, DNS:$service.$namespace.svc, DNS:$service.$namespace.svc.cluster.local
EXT
  openssl x509 -req -sha256 -days "$days" -in "$out/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -extfile "$out/tls.ext" -out "$out/tls.crt" 2>/dev/null
  rm -f "$out/tls.csr" "$out/tls.ext" "$out/ca.srl"
fi

b64() { base64 -w0 "$1"; }
cat >"$out/secret.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: mgpu-extender-tls
  namespace: $namespace
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$out/tls.crt")
  tls.key: $(b64 "$out/tls.key")
  ca.crt: $(b64 "$out/ca.crt")
YAML
b64 "$out/ca.crt" >"$out/caBundle"

if $apply; then
  kubectl apply -f "$out/secret.yaml"
  # The two webhook configurations of deploy/extender/, and the DRA mode's two of deploy/dra/ where they are
  # applied.
  for config in "validatingwebhookconfiguration $service" "mutatingwebhookconfiguration $service" \
    "validatingwebhookconfiguration $service-dra" "mutatingwebhookconfiguration $service-dra"; do
    # shellcheck disable=SC2086
    if ! count=$(kubectl get $config -o jsonpath='{range .webhooks[*]}x{end}' 2>/dev/null); then
      case $config in *-dra) continue ;; esac
      echo "certs.sh: there is no $config; apply deploy/ first" >&2
      exit 1
    fi
    patch=""
    for ((i = 0; i < ${#count}; i++)); do
      patch+="${patch:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$(cat "$out/caBundle")\"}"
    done
    # shellcheck disable=SC2086
    kubectl patch $config --type=json -p "[$patch]"
  done
fi
echo "certs.sh: wrote $out/{ca.crt,ca.key,tls.crt,tls.key,secret.yaml,caBundle}; caBundle:"
cat "$out/caBundle"
echo
