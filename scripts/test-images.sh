#!/usr/bin/env bash
# The images of the real-cluster tests (scripts/cluster.sh), made in seconds without a registry, a container
# engine or a base image: each is a docker-archive tar (one layer, a config, a manifest) that containerd's
# `ctr images import` reads. Prints the archives' paths, one a line.
#   scripts/test-images.sh base   localhost/pause:mgpu (the sandbox image) and localhost/busybox:mgpu, from
#                                 Debian's busybox-static
#   scripts/test-images.sh mgpu   the two daemons' images as deploy/ names them (mgpu/mgpu-scheduler-extender,
#                                 mgpu/mgpu-device-plugin), thin: the binaries this build made with the shared
#                                 libraries they load (ldd) and the guard, on no base; and
#                                 localhost/workload:mgpu, busybox plus this machine's glibc, so that
#                                 /etc/ld.so.preload (which static programs ignore) loads the guard
#                                 into a dynamic program, mgpu-guard-probe
# These are test images: the images an operator deploys are scripts/images.sh's (a Debian 12 base, the
# daemons built in their own build stage), checked outside CI because they take minutes to build cold.
# Archives go to MGPU_TEST_IMAGES_DIR (default build/test-images).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${MGPU_BUILD_DIR:-$repo/build}
out=${MGPU_TEST_IMAGES_DIR:-$build/test-images}
version=$(sed -n 's/^project(mgpu VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")

die() {
  echo "test-images.sh: $*" >&2
  exit 1
}

# archive NAME:TAG ROOTFS ENTRYPOINT-JSON: writes $out/<name>-<tag>.tar, prints its path.
archive() {
  local ref=$1 root=$2 entrypoint=$3
  local file
  file=$out/$(echo "$ref" | tr '/:' '--').tar
  local work
  work=$(mktemp -d)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$work/layer.tar" .
  local layer
  layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  mkdir -p "$work/$layer"
  mv "$work/layer.tar" "$work/$layer/layer.tar"
  cat >"$work/config.json" <<EOF
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"Entrypoint":$entrypoint,"Env":["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"],"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$layer"]},
 "history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/test-images.sh"}]}
EOF
  local config
  config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' "$config" "$ref" "$layer" \
    >"$work/manifest.json"
  mkdir -p "$out"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$file.tmp" .
  mv "$file.tmp" "$file"
  rm -rf "$work"
  echo "$file"
}

# A root with busybox-static and its applets under /bin.
busybox_root() {
  local root=$1 busybox
  busybox=$(command -v busybox) || die "busybox is not installed (bash scripts/setup.sh installs busybox-static)."
  ! ldd "$busybox" >/dev/null 2>&1 || die "$busybox is not the static busybox (install busybox-static)."
  mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/run"
  chmod 1777 "$root/tmp"
  cp "$busybox" "$root/bin/busybox"
  local applet
  for applet in $("$busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"
  echo 'nobody:x:65534:65534:nobody:/:/bin/false' >>"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
}

# Copies binaries and every shared library they load (as ldd resolves them here) into a root, at the same paths.
with_libraries() {
  local root=$1
  shift
  local f lib
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'); do
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

base() {
  local work
  work=$(mktemp -d)
  busybox_root "$work/root"
  archive localhost/pause:mgpu "$work/root" '["/bin/sleep","2147483647"]'
  archive localhost/busybox:mgpu "$work/root" '["/bin/sh"]'
  rm -rf "$work"
}

mgpu() {
  local extender=$build/src/extender/mgpu-scheduler-extender
  local plugin=$build/src/node/mgpu-device-plugin
  local guard=$build/src/guard/libmgpu-guard.so
  local probe=$build/src/guard/mgpu_guard_probe
  local f
  for f in "$extender" "$plugin" "$guard" "$probe"; do
    [ -f "$f" ] || die "$f is not built (bash scripts/setup.sh mgpu-scheduler-extender mgpu-device-plugin mgpu-guard mgpu_guard_probe)."
  done
  local work
  work=$(mktemp -d)
  mkdir -p "$work/extender/tmp" "$work/plugin/tmp" "$work/workload"
  with_libraries "$work/extender" "$extender"
  mv "$work/extender$extender" "$work/extender/mgpu-scheduler-extender"
  archive "mgpu/mgpu-scheduler-extender:$version" "$work/extender" '["/mgpu-scheduler-extender"]'
  with_libraries "$work/plugin" "$plugin"
  mv "$work/plugin$plugin" "$work/plugin/mgpu-device-plugin"
  # Where the Dockerfile puts the guard: config isolation.guardLibrarySource.
  mkdir -p "$work/plugin/usr/local/lib/mgpu"
  cp "$guard" "$work/plugin/usr/local/lib/mgpu/libmgpu-guard.so"
  archive "mgpu/mgpu-device-plugin:$version" "$work/plugin" '["/mgpu-device-plugin"]'
  busybox_root "$work/workload"
  with_libraries "$work/workload" "$probe"
  mv "$work/workload$probe" "$work/workload/bin/mgpu-guard-probe"
  # A dynamic shell command besides the probe: the guard loads into every process of the container.
  with_libraries "$work/workload" /usr/bin/env
  archive localhost/workload:mgpu "$work/workload" '["/bin/sh"]'
  rm -rf "$work"
}

case "${1:-}" in
  base) base ;;
  mgpu) mgpu ;;
  *) die "usage: scripts/test-images.sh base|mgpu" ;;
esac
