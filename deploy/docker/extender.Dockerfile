# mgpu-scheduler-extender: built on Debian 12 by the repository's own set-up script, run on Debian 12 with
# the runtime libraries only, as an unprivileged user. From the repository root:
#   docker build -f deploy/docker/extender.Dockerfile -t mgpu/mgpu-scheduler-extender:0.1.0 .
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN MGPU_BUILD_DIR=/build bash scripts/setup.sh mgpu-scheduler-extender

FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libcurl4 libspdlog1.10 libfmt9 libyaml-cpp0.7 libcpp-httplib0.11 libsimdjson14 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/src/extender/mgpu-scheduler-extender /usr/local/bin/mgpu-scheduler-extender
USER 65534:65534
EXPOSE 12345
ENTRYPOINT ["/usr/local/bin/mgpu-scheduler-extender"]
CMD ["--config", "/etc/mgpu/config.yaml"]
