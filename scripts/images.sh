#!/usr/bin/env bash
# Builds the daemons' container images from deploy/docker/ with podman and checks that they run: a Debian 12
# base made here with debootstrap (localhost/debian:12 for the build stages, localhost/debian:12-slim for the
# runtime stages), both images, an ldd check of every binary in them, then each image run against the demo's
# fakes (scripts/run.sh --keep-running): the extender answers /readyz and /filter, the device plugin registers
# its three resources with the fake kubelet of node-a10 and installs libmgpu-guard.so. Prints the images'
# sizes and build times; exits non-zero when a step or a check fails.
# Usage: scripts/images.sh [base] [build] [check]   (no step: all three)
#   MGPU_IMAGE_CACHE (default /var/tmp/mgpu-img): the debootstrap root file system and the builds' ccache.
#   MGPU_IMAGE_TAG (default 0.1.0): the tag of localhost/mgpu/mgpu-scheduler-extender and mgpu-device-plugin.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${MGPU_IMAGE_CACHE:-/var/tmp/mgpu-img}
tag=${MGPU_IMAGE_TAG:-0.1.0}
mirror=http://deb.debian.org/debian
extender_image=localhost/mgpu/mgpu-scheduler-extender:$tag
plugin_image=localhost/mgpu/mgpu-device-plugin:$tag
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(base build check)
for step in "${steps[@]}"; do
  case $step in
    base | build | check) ;;
    *) echo "images: unknown step '$step' (base, build or check)" >&2; exit 2 ;;
  esac
done
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }

# Flags for every podman build and run. runc, not Debian's default crun: crun refuses to start containers in a
# host whose cgroups are in hybrid mode (as inside another container). Explicit ulimits: podman otherwise
# copies the host's limits, which a nested container may not set. Host network: the checks reach the demo's
# fakes on 127.0.0.1, and no bridge needs setting up. All three work the same on a plain Debian 12 host.
podman_flags=(--runtime runc --network host --ulimit nofile=20000:20000 --ulimit nproc=1024:1024)

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
missing=()
for p in debootstrap podman runc curl python3; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "images: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
podman=($sudo_cmd podman)

image_exists() { "${podman[@]}" image exists "$1"; }

# --- base: localhost/debian:12 and localhost/debian:12-slim ------------------------------------------------
# Both are debootstrap's minbase variant (Essential and apt, as Docker Hub's debian:12 is), with apt pointed
# at bookworm, bookworm-updates and the security archive, and no package lists, .deb files, /dev nodes or host
# files (hostname, resolv.conf) left in. The slim one also drops documentation, manual pages and translations,
# now and for every package installed later (a dpkg path-exclude, as Docker Hub's debian:12-slim does):
# nothing in an image that only runs a daemon reads them.
import_rootfs() {  # folder, image
  $sudo_cmd tar --numeric-owner -C "$1" -cf - . |
    "${podman[@]}" import --quiet --change 'CMD ["bash"]' - "$2" >/dev/null
}

make_base() {
  if image_exists localhost/debian:12 && image_exists localhost/debian:12-slim; then
    echo "images: localhost/debian:12 and localhost/debian:12-slim exist (podman rmi them to make them again)"
    return
  fi
  local rootfs=$cache/rootfs
  if [ ! -f "$rootfs/etc/debian_version" ]; then
    echo "images: debootstrap --variant=minbase bookworm $rootfs $mirror"
    $sudo_cmd mkdir -p "$cache"
    $sudo_cmd rm -rf "$rootfs"
    $sudo_cmd debootstrap --variant=minbase bookworm "$rootfs" "$mirror"
  fi
  local stage=$cache/stage
  $sudo_cmd rm -rf "$stage"
  $sudo_cmd cp -a "$rootfs" "$stage"
  $sudo_cmd sh -c "
    set -e
    cd '$stage'
    rm -rf var/cache/apt/archives/*.deb var/cache/apt/*.bin var/lib/apt/lists/* dev/* tmp/* var/tmp/* \
      var/log/*.log var/log/apt/* etc/hostname
    : > etc/resolv.conf
    cat > etc/apt/sources.list <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF"
  import_rootfs "$stage" localhost/debian:12
  $sudo_cmd sh -c "
    set -e
    cd '$stage'
    cat > etc/dpkg/dpkg.cfg.d/mgpu-slim <<EOF
# A daemon's image: no documentation, manual pages or translations (copyright files stay).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    find usr/share/doc -mindepth 1 ! -name copyright ! -type d -delete
    find usr/share/doc -mindepth 1 -type d -empty -delete
    rm -rf usr/share/man/* usr/share/info/* usr/share/groff/* usr/share/lintian/*
    find usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +"
  import_rootfs "$stage" localhost/debian:12-slim
  $sudo_cmd rm -rf "$stage"
  echo "images: imported localhost/debian:12 and localhost/debian:12-slim"
}

# --- build: both images, with a ccache of their own mounted into the build stage ----------------------------
build_image() {  # Dockerfile, image
  local start=$SECONDS
  "${podman[@]}" build "${podman_flags[@]}" --volume "$cache/ccache:/var/cache/mgpu-ccache" \
    --build-arg BASE=localhost/debian:12 --build-arg RUNTIME_BASE=localhost/debian:12-slim \
    -f "$1" -t "$2" .
  echo "images: built $2 in $((SECONDS - start)) s"
}

# Every shared library each binary needs resolves inside its own image.
check_libraries() {  # image, binary...
  local image=$1 binary out
  shift
  for binary in "$@"; do
    out=$("${podman[@]}" run --rm "${podman_flags[@]}" --user 0 --entrypoint ldd "$image" "$binary")
    if grep -q "not found" <<<"$out"; then
      echo "images: FAILED: $binary in $image lacks libraries:" >&2
      grep "not found" <<<"$out" >&2
      return 1
    fi
    echo "images: ok: every library of $binary is in $image ($(wc -l <<<"$out") entries)"
  done
}

if wants base; then
  start=$SECONDS
  make_base
  echo "images: base step in $((SECONDS - start)) s"
fi
if wants build; then
  $sudo_cmd mkdir -p "$cache/ccache"
  build_image deploy/docker/extender.Dockerfile "$extender_image"
  build_image deploy/docker/device-plugin.Dockerfile "$plugin_image"
  check_libraries "$extender_image" /usr/local/bin/mgpu-scheduler-extender
  check_libraries "$plugin_image" /usr/local/bin/mgpu-device-plugin /usr/local/lib/mgpu/libmgpu-guard.so
fi

# --- check: each image against the demo's fakes ------------------------------------------------------------
failures=0
check() {  # description, command...: runs the command, reports, counts a failure
  local description=$1
  shift
  if "$@"; then
    echo "images: ok: $description"
  else
    echo "images: FAILED: $description" >&2
    failures=$((failures + 1))
  fi
}

# Waits up to 60 s for a command to succeed.
wait_for() {
  local deadline=$((SECONDS + 60))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if wants check; then
  work=$(mktemp -d /tmp/mgpu-images.XXXXXX)
  demo_pid=""
  containers=()
  cleanup() {
    for c in "${containers[@]}"; do "${podman[@]}" rm -f "$c" >/dev/null 2>&1 || true; done
    if [ -n "$demo_pid" ]; then kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true; fi
    $sudo_cmd rm -rf "$work"
  }
  trap cleanup EXIT
  chmod 755 "$work"

  # The demo: the fake API server, the in-process daemons and a fake kubelet per node of nodes.yaml.
  bash scripts/setup.sh mgpu-demo kubectl-mgpu >/dev/null
  bash scripts/run.sh --keep-running >"$work/demo.log" 2>&1 &
  demo_pid=$!
  demo_up() { grep -q "export KUBECONFIG=" "$work/demo.log" || ! kill -0 "$demo_pid" 2>/dev/null; }
  wait_for demo_up || true
  kubeconfig=$(sed -n 's/.*export KUBECONFIG=\([^ ]*\) .*/\1/p' "$work/demo.log")
  if [ -z "$kubeconfig" ]; then
    echo "images: FAILED: the demo did not start:" >&2
    cat "$work/demo.log" >&2
    exit 1
  fi
  demo_dir=$(dirname "$kubeconfig")
  # Readable by the extender's unprivileged user (the demo's own folder is private).
  install -m 644 "$kubeconfig" "$work/kubeconfig"

  # The extender, as nobody, on a free port.
  extender_port=$(free_port)
  cat >"$work/extender.yaml" <<EOF
memoryUnitMiB: 16
extender:
  listenAddress: 127.0.0.1:$extender_port
  leaderElection: false
EOF
  chmod 644 "$work/extender.yaml"
  containers+=(mgpu-images-extender)
  "${podman[@]}" rm -f mgpu-images-extender >/dev/null 2>&1 || true
  "${podman[@]}" run -d --name mgpu-images-extender "${podman_flags[@]}" \
    -v "$work/extender.yaml:/etc/mgpu/config.yaml:ro" -v "$work/kubeconfig:/etc/mgpu/kubeconfig:ro" \
    "$extender_image" --config /etc/mgpu/config.yaml --kubeconfig /etc/mgpu/kubeconfig >/dev/null
  extender=http://127.0.0.1:$extender_port
  extender_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$extender/readyz")" = 200 ]; }
  check "the extender container answers GET /readyz with 200" wait_for extender_ready
  runs_as_nobody() { [ "$("${podman[@]}" exec mgpu-images-extender id -u)" = 65534 ]; }
  check "the extender runs as uid 65534" runs_as_nobody

  # /filter, with kube-scheduler's own bytes: a pod asking no mgpu resource passes every node it names.
  fixture=tests/fixtures/kube-scheduler/v1.32/cache-filter-001.json
  post_filter() {  # body file, output file
    [ "$(curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$1" \
      "$extender/filter")" = 200 ]
  }
  filter_answers() {  # body file, output file, Python condition on the answer `a` and the body `b`
    post_filter "$1" "$2" && python3 -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if $3 else 1)" "$2" "$1"
  }
  check "POST /filter of $fixture passes the pod (no mgpu resource) on every node it names" \
    filter_answers "$fixture" "$work/fixture.out" "a['NodeNames'] == b['NodeNames'] and not a.get('Error')"
  echo "images: /filter of the fixture: $(head -c 300 "$work/fixture.out")"
  # The same pod asking mgpu on the demo's nodes: half a card and 4 GiB fit both; 100 GiB fits neither card.
  filter_body() {  # core percent, memory units of 16 MiB, output file
    python3 - "$fixture" "$1" "$2" >"$3" <<'EOF'
import json, sys
body = json.load(open(sys.argv[1]))
body["Pod"]["metadata"]["uid"] = "images-" + sys.argv[2] + "-" + sys.argv[3]
for c in body["Pod"]["spec"]["containers"]:
    amounts = {"mgpu.io/mgpu-core": sys.argv[2], "mgpu.io/mgpu-memory": sys.argv[3]}
    c["resources"] = {"limits": amounts, "requests": amounts}
body["NodeNames"] = ["node-a10", "node-h100"]
json.dump(body, sys.stdout)
EOF
  }
  filter_body 50 256 "$work/fits.json"
  check "POST /filter of a pod asking 50 % core and 4 GiB passes node-a10 and node-h100" \
    filter_answers "$work/fits.json" "$work/fits.out" \
    "sorted(a['NodeNames'] or []) == ['node-a10', 'node-h100'] and not a.get('Error')"
  echo "images: /filter of 4 GiB: $(cat "$work/fits.out")"
  filter_body 50 6400 "$work/too-big.json"
  check "POST /filter of a pod asking 100 GiB fails both nodes, each with a reason" \
    filter_answers "$work/too-big.json" "$work/too-big.out" \
    "not a['NodeNames'] and sorted(a['FailedNodes']) == ['node-a10', 'node-h100'] and \
     all(a['FailedNodes'].values())"
  echo "images: /filter of 100 GiB: $(head -c 400 "$work/too-big.out")"

  # The device plugin, as root, in node-a10's kubelet folder (its device-plugins/ and pod-resources.sock),
  # over node-a10's cards of nodes.yaml (no NVML here: the static backend), with a node folder for the guard.
  # Its resource domain is its own: under mgpu.io its sockets would have the paths of the demo's in-process
  # plugin of node-a10, which is still serving, and the fake kubelet's gRPC would reuse its open connection
  # to that plugin, so the check would prove nothing. The domain also keeps its node annotations apart.
  plugin_port=$(free_port)
  mkdir -p "$work/var-lib-mgpu"
  sed -n '/name: node-a10/,/name: node-h100/p' deploy/examples/nodes.yaml | grep '^ *- {index:' |
    sed 's/^ *//' >"$work/cards.yaml"
  domain=image-check.mgpu.io
  cat >"$work/plugin.yaml" <<EOF
resourceDomain: $domain
memoryUnitMiB: 16
devicePlugin:
  devicePluginDir: /var/lib/kubelet/device-plugins
  podResourcesSocket: /var/lib/kubelet/pod-resources.sock
  gpuBackend: static
  staticInventoryFile: /etc/mgpu/cards.yaml
  metricsAddress: 127.0.0.1:$plugin_port
  podResourcesPollMs: 100
EOF
  containers+=(mgpu-images-plugin)
  "${podman[@]}" rm -f mgpu-images-plugin >/dev/null 2>&1 || true
  "${podman[@]}" run -d --name mgpu-images-plugin "${podman_flags[@]}" -e NODE_NAME=node-a10 \
    -v "$work/plugin.yaml:/etc/mgpu/config.yaml:ro" -v "$work/cards.yaml:/etc/mgpu/cards.yaml:ro" \
    -v "$work/kubeconfig:/etc/mgpu/kubeconfig:ro" -v "$demo_dir/node-a10:/var/lib/kubelet" \
    -v "$work/var-lib-mgpu:/var/lib/mgpu" \
    "$plugin_image" --config /etc/mgpu/config.yaml --kubeconfig /etc/mgpu/kubeconfig >/dev/null
  plugin_log() { "${podman[@]}" logs mgpu-images-plugin 2>&1; }
  # Registered: the fake kubelet accepted Register; listed: it then dialled the container's socket and
  # opened ListAndWatch, which sent the devices.
  registered_and_listed() {
    local log r
    log=$(plugin_log)
    for r in $domain/mgpu-core $domain/mgpu-memory $domain/reclaimed-mgpu-core; do
      grep -q "resource=$r registered with the kubelet" <<<"$log" || return 1
      grep -q "resource=$r sent [1-9][0-9]* devices" <<<"$log" || return 1
    done
  }
  check "the device plugin container registers its three resources with the fake kubelet, which lists them" \
    wait_for registered_and_listed
  guard_installed() { [ -s "$work/var-lib-mgpu/lib/libmgpu-guard.so" ]; }
  check "the device plugin container installs libmgpu-guard.so in the node's /var/lib/mgpu/lib" \
    wait_for guard_installed
  plugin_healthy() {
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$plugin_port/healthz")" = 200 ]
  }
  check "the device plugin container answers GET /healthz with 200" wait_for plugin_healthy
  plugin_log | grep -E "registered with the kubelet|sent [0-9]+ devices" | sed 's/^/images: plugin: /'

  if [ "$failures" -gt 0 ]; then
    echo "images: $failures check(s) failed; the containers' logs:" >&2
    for c in "${containers[@]}"; do
      echo "--- $c" >&2
      "${podman[@]}" logs "$c" 2>&1 | tail -20 >&2
    done
  fi
fi

echo "images: sizes"
"${podman[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' |
  grep -E "^localhost/(debian:12|mgpu/)" | sed 's/^/  /'
[ "$failures" -eq 0 ]
