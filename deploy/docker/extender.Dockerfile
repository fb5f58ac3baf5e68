# mgpu-scheduler-extender: built on Debian 12 by the repository's own set-up script (the daemons' build
# dependencies only: MGPU_SETUP=daemons), run on Debian 12 with the runtime libraries only, as an
# unprivileged user. From the repository root:
#   docker build -f deploy/docker/extender.Dockerfile -t mgpu/mgpu-scheduler-extender:0.1.0 .
# scripts/images.sh builds it with podman over a Debian 12 made locally (the build arguments BASE and
# RUNTIME_BASE) and mounts a ccache folder at /var/cache/mgpu-ccache; without that mount the folder is simply
# empty.
ARG BASE=debian:12
ARG RUNTIME_BASE=debian:12-slim

FROM ${BASE} AS build
WORKDIR /src
# The packages first, in a layer of their own: it stays cached while the sources change (and is the same layer
# as the device plugin's build stage).
COPY scripts/setup.sh scripts/setup.sh
RUN MGPU_SETUP=daemons bash scripts/setup.sh --packages-only
COPY . .
# Without debug information (the symbols stay, for backtraces): it is most of the binaries' size.
RUN CCACHE_DIR=/var/cache/mgpu-ccache MGPU_SETUP=daemons MGPU_BUILD_DIR=/build \
    bash scripts/setup.sh mgpu-scheduler-extender \
 && strip --strip-debug /build/src/extender/mgpu-scheduler-extender

FROM ${RUNTIME_BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libcurl4 libnghttp2-14 libspdlog1.10 libfmt9 libyaml-cpp0.7 libcpp-httplib0.11 libsimdjson14 \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/src/extender/mgpu-scheduler-extender /usr/local/bin/mgpu-scheduler-extender
# No per-thread malloc caches: chunks a long-lived thread (an informer's) keeps cached after a wave of pods
# are scattered over the heap and keep its pages resident after the wave is trimmed (bench/RESULTS.md
# section 5: RSS after deleting 2,000 pods 12-23 percent over empty with the caches, -3 to +7 without).
ENV GLIBC_TUNABLES=glibc.malloc.tcache_count=0
USER 65534:65534
EXPOSE 12345
ENTRYPOINT ["/usr/local/bin/mgpu-scheduler-extender"]
CMD ["--config", "/etc/mgpu/config.yaml"]
