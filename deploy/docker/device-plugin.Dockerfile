# mgpu-device-plugin: built on Debian 12 by the repository's own set-up script (the daemons' build
# dependencies only: MGPU_SETUP=daemons), run on Debian 12 with the runtime libraries only. NVML is not in the
# image: the NVIDIA container toolkit mounts the host driver's libnvidia-ml.so.1
# (NVIDIA_DRIVER_CAPABILITIES=utility), which the plugin loads at run time. It runs as root: it serves sockets
# in the kubelet's /var/lib/kubelet/device-plugins. The image also carries libmgpu-guard.so, which the plugin
# installs on the node (isolation.guardLibrarySource -> guardLibraryPath) for containers to preload. From the
# repository root:
#   docker build -f deploy/docker/device-plugin.Dockerfile -t mgpu/mgpu-device-plugin:0.1.0 .
# scripts/images.sh builds it with podman over a Debian 12 made locally (the build arguments BASE and
# RUNTIME_BASE) and mounts a ccache folder at /var/cache/mgpu-ccache; without that mount the folder is simply
# empty.
ARG BASE=debian:12
ARG RUNTIME_BASE=debian:12-slim

FROM ${BASE} AS build
WORKDIR /src
# The packages first, in a layer of their own: it stays cached while the sources change (and is the same layer
# as the extender's build stage).
COPY scripts/setup.sh scripts/setup.sh
RUN MGPU_SETUP=daemons bash scripts/setup.sh --packages-only
COPY . .
# Without debug information (the symbols stay, for backtraces): it is most of the binaries' size.
RUN CCACHE_DIR=/var/cache/mgpu-ccache MGPU_SETUP=daemons MGPU_BUILD_DIR=/build \
    bash scripts/setup.sh mgpu-device-plugin mgpu-guard \
 && strip --strip-debug /build/src/node/mgpu-device-plugin /build/src/guard/libmgpu-guard.so

FROM ${RUNTIME_BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libgrpc++1.51 libprotobuf32 libcurl4 libnghttp2-14 libspdlog1.10 libfmt9 libyaml-cpp0.7 \
      libcpp-httplib0.11 \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/src/node/mgpu-device-plugin /usr/local/bin/mgpu-device-plugin
COPY --from=build /build/src/guard/libmgpu-guard.so /usr/local/lib/mgpu/libmgpu-guard.so
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 9400
ENTRYPOINT ["/usr/local/bin/mgpu-device-plugin"]
CMD ["--config", "/etc/mgpu/config.yaml"]
