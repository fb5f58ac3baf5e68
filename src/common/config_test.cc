#include "common/config.h"

#include <gtest/gtest.h>

namespace mgpu {
namespace {

TEST(Config, EmptyFileGivesDefaults) {
  auto c = ParseConfig("");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->resource_domain, "mgpu.io");
  EXPECT_EQ(c->memory_unit_mib, 1);
  EXPECT_EQ(c->reserved_memory_mib, 0);
  EXPECT_EQ(c->min_core_percent, 5);
  EXPECT_EQ(c->default_compute_policy, ComputePolicy::kFixedShare);
  EXPECT_EQ(c->default_card_policy, CardPolicy::kFragmentation);
  EXPECT_EQ(c->default_node_policy, NodePolicy::kFragmentation);
  EXPECT_EQ(c->isolation.backend, IsolationBackend::kMgpu);
  EXPECT_EQ(c->isolation.guard_library_path, "/var/lib/mgpu/lib/libmgpu-guard.so");
  EXPECT_EQ(c->isolation.guard_state_directory, "/var/lib/mgpu/cards");
  EXPECT_EQ(c->extender.assignment_ttl_seconds, 300);
  EXPECT_EQ(c->device_plugin.device_plugin_dir, "/var/lib/kubelet/device-plugins");
}

TEST(Config, ReadsEveryKey) {
  auto c = ParseConfig(R"(
resourceDomain: vke.volcengine.com
memoryUnitMiB: 16
reservedMemoryMiB: 512
minCorePercent: 10
defaultComputePolicy: guaranteed-burst-share
cardPolicy: spread
nodePolicy: spread
isolation: {backend: hami-core, hamiLibraryPath: /opt/vgpu/libvgpu.so, mpsPipeDirectory: /run/mps,
            guardLibraryPath: /opt/mgpu/libmgpu-guard.so, guardStateDirectory: /run/mgpu, guardLibrarySource: ""}
devicePlugin:
  nodeName: node-a
  devicePluginDir: /tmp/dp
  podResourcesSocket: /tmp/pr.sock
  gpuBackend: static
  staticInventoryFile: /etc/mgpu/cards.yaml
  metricsAddress: 127.0.0.1:9999
  podResourcesPollMs: 200
  pendingPodWaitMs: 100
  nodeHeartbeatSeconds: 30
extender:
  listenAddress: 127.0.0.1:8888
  assignmentTTLSeconds: 60
  bindWaitMs: 250
  maxBodyBytes: 2048
  httpWorkers: 16
  httpRequestTimeoutMs: 2500
  httpConnectionsPerClient: 12
  maxPods: 5000
  eventsPerSecond: 7
  leaderElection: true
  leaseNamespace: mgpu
  leaseName: ext
  leaseDurationSeconds: 10
  tlsCertFile: /c.pem
  tlsKeyFile: /k.pem
)");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->resource_domain, "vke.volcengine.com");
  EXPECT_EQ(c->Names().core, "vke.volcengine.com/mgpu-core");
  EXPECT_EQ(c->Names().reclaimed_core, "vke.volcengine.com/reclaimed-mgpu-core");
  EXPECT_EQ(c->memory_unit_mib, 16);
  EXPECT_EQ(c->reserved_memory_mib, 512);
  EXPECT_EQ(c->min_core_percent, 10);
  EXPECT_EQ(c->default_compute_policy, ComputePolicy::kGuaranteedBurstShare);
  EXPECT_EQ(c->default_card_policy, CardPolicy::kSpread);
  EXPECT_EQ(c->default_node_policy, NodePolicy::kSpread);
  EXPECT_EQ(c->isolation.backend, IsolationBackend::kHamiCore);
  EXPECT_EQ(c->isolation.hami_library_path, "/opt/vgpu/libvgpu.so");
  EXPECT_EQ(c->isolation.mps_pipe_directory, "/run/mps");
  EXPECT_EQ(c->isolation.guard_library_path, "/opt/mgpu/libmgpu-guard.so");
  EXPECT_EQ(c->isolation.guard_state_directory, "/run/mgpu");
  EXPECT_EQ(c->isolation.guard_library_source, "");
  EXPECT_EQ(c->device_plugin.node_name, "node-a");
  EXPECT_EQ(c->device_plugin.gpu_backend, "static");
  EXPECT_EQ(c->device_plugin.static_inventory_file, "/etc/mgpu/cards.yaml");
  EXPECT_EQ(c->device_plugin.pod_resources_poll_ms, 200);
  EXPECT_EQ(c->device_plugin.pending_pod_wait_ms, 100);
  EXPECT_EQ(c->device_plugin.node_heartbeat_seconds, 30);
  EXPECT_EQ(c->extender.listen_address, "127.0.0.1:8888");
  EXPECT_EQ(c->extender.assignment_ttl_seconds, 60);
  EXPECT_EQ(c->extender.bind_wait_ms, 250);
  EXPECT_EQ(c->extender.max_body_bytes, 2048);
  EXPECT_EQ(c->extender.http_workers, 16);
  EXPECT_EQ(c->extender.http_request_timeout_ms, 2500);
  EXPECT_EQ(c->extender.http_connections_per_client, 12);
  EXPECT_EQ(c->extender.max_pods, 5000);
  EXPECT_EQ(c->extender.events_per_second, 7);
  EXPECT_TRUE(c->extender.leader_election);
  EXPECT_EQ(c->extender.lease_name, "ext");
  EXPECT_EQ(c->extender.tls_key_file, "/k.pem");
}

TEST(Config, RejectsUnknownKeysWithTheirPath) {
  EXPECT_EQ(ParseConfig("resourceDomian: x").message(), "config: resourceDomian is not a known key");
  EXPECT_EQ(ParseConfig("extender: {listenAdress: x}").message(),
            "config: extender.listenAdress is not a known key");
  EXPECT_EQ(ParseConfig("isolation: {backend: none, extra: 1}", "/etc/mgpu/config.yaml").message(),
            "/etc/mgpu/config.yaml: isolation.extra is not a known key");
  // A complex key (found by fuzz_config: it threw out of the parser).
  EXPECT_EQ(ParseConfig("? {podResourcesPollMs: 433}\n").message(),
            "config: the top level has a key that is not a plain name");
  EXPECT_EQ(ParseConfig("extender:\n  ? [a]\n  : 1\n").message(),
            "config: extender has a key that is not a plain name");
}

TEST(Config, RejectsBadValuesWithTheirPath) {
  EXPECT_EQ(ParseConfig("memoryUnitMiB: 0").message(),
            "config: memoryUnitMiB must be between 1 and 1048576, got 0");
  EXPECT_EQ(ParseConfig("memoryUnitMiB: lots").message(),
            "config: memoryUnitMiB must be a whole number, got \"lots\"");
  EXPECT_EQ(ParseConfig("minCorePercent: 101").message(),
            "config: minCorePercent must be between 1 and 100, got 101");
  EXPECT_EQ(ParseConfig("cardPolicy: random").message(),
            "config: cardPolicy must be one of binpack, spread, fragmentation, got \"random\"");
  EXPECT_EQ(
      ParseConfig("defaultComputePolicy: best").message(),
      "config: defaultComputePolicy must be one of fixed-share, guaranteed-burst-share, native-burst-share, "
      "got \"best\"");
  EXPECT_EQ(ParseConfig("isolation: {backend: gvisor}").message(),
            "config: isolation.backend must be one of mgpu, none, hami-core, mps, got \"gvisor\"");
  EXPECT_EQ(ParseConfig("isolation: {guardStateDirectory: var/lib/mgpu}").message(),
            "config: isolation.guardStateDirectory must be an absolute path with no spaces or colons and no "
            "trailing slash, got \"var/lib/mgpu\"");
  EXPECT_EQ(ParseConfig("isolation: {guardLibraryPath: '/a b/libmgpu-guard.so'}").message(),
            "config: isolation.guardLibraryPath must be an absolute path with no spaces or colons and no "
            "trailing slash, got \"/a b/libmgpu-guard.so\"");
  EXPECT_EQ(ParseConfig("isolation: {guardLibrarySource: lib.so}").message(),
            "config: isolation.guardLibrarySource must be an absolute path or empty, got \"lib.so\"");
  EXPECT_TRUE(ParseConfig("isolation: {backend: none, guardStateDirectory: relative}").ok());
  EXPECT_EQ(ParseConfig("extender: {leaderElection: maybe}").message(),
            "config: extender.leaderElection must be true or false, got \"maybe\"");
  EXPECT_EQ(ParseConfig("extender: 3").message(), "config: extender must be a mapping");
  EXPECT_EQ(
      ParseConfig("extender: {httpWorkers: 8}").message(),
      "config: extender.httpConnectionsPerClient (96) must be below extender.httpWorkers (8), so that one "
      "client never holds every worker");
  EXPECT_EQ(ParseConfig("memoryUnitMiB: [1]").message(), "config: memoryUnitMiB must be a single value");
  EXPECT_EQ(ParseConfig("devicePlugin: {gpuBackend: fake}").message(),
            "config: devicePlugin.gpuBackend must be one of nvml, static, got \"fake\"");
  EXPECT_EQ(ParseConfig("devicePlugin: {gpuBackend: static}").message(),
            "config: devicePlugin.staticInventoryFile is required when devicePlugin.gpuBackend is static");
  EXPECT_EQ(ParseConfig("resourceDomain: ''").message(), "config: resourceDomain must not be empty");
  EXPECT_FALSE(ParseConfig("a: [").ok());
  EXPECT_EQ(ParseConfig("- 1").message(), "config: the file must be a mapping");
}

TEST(Config, LoadsAFileAndNamesAMissingOne) {
  EXPECT_EQ(LoadConfigFile("/nonexistent/mgpu.yaml").message(),
            "cannot read config file /nonexistent/mgpu.yaml");
}

}  // namespace
}  // namespace mgpu

namespace mgpu {
namespace {

// deploy/examples/config.yaml documents every key with its default: it must load and equal the defaults.
TEST(Config, TheDocumentedExampleLoadsAndMatchesTheDefaults) {
  auto c = LoadConfigFile(std::string(MGPU_SOURCE_DIR) + "/deploy/examples/config.yaml");
  ASSERT_TRUE(c.ok()) << c.message();
  const Config d;
  EXPECT_EQ(c->resource_domain, d.resource_domain);
  EXPECT_EQ(c->memory_unit_mib, d.memory_unit_mib);
  EXPECT_EQ(c->min_core_percent, d.min_core_percent);
  EXPECT_EQ(c->isolation.hami_library_path, d.isolation.hami_library_path);
  EXPECT_EQ(c->device_plugin.pod_resources_socket, d.device_plugin.pod_resources_socket);
  EXPECT_EQ(c->device_plugin.pending_pod_wait_ms, d.device_plugin.pending_pod_wait_ms);
  EXPECT_EQ(c->device_plugin.node_heartbeat_seconds, d.device_plugin.node_heartbeat_seconds);
  EXPECT_EQ(c->extender.max_body_bytes, d.extender.max_body_bytes);
  EXPECT_EQ(c->extender.bind_wait_ms, d.extender.bind_wait_ms);
  EXPECT_EQ(c->extender.lease_name, d.extender.lease_name);
  EXPECT_EQ(c->extender.http_workers, d.extender.http_workers);
  EXPECT_EQ(c->extender.http_request_timeout_ms, d.extender.http_request_timeout_ms);
  EXPECT_EQ(c->extender.http_connections_per_client, d.extender.http_connections_per_client);
  EXPECT_EQ(c->extender.max_pods, d.extender.max_pods);
  EXPECT_EQ(c->extender.events_per_second, d.extender.events_per_second);
  EXPECT_EQ(c->device_plugin.mode, d.device_plugin.mode);
  EXPECT_EQ(c->dra.kubelet_root_dir, d.dra.kubelet_root_dir);
  EXPECT_EQ(c->dra.cdi_directory, d.dra.cdi_directory);
  EXPECT_EQ(c->dra.state_directory, d.dra.state_directory);
  EXPECT_EQ(c->dra.device_root, d.dra.device_root);
  EXPECT_EQ(c->dra.cards, d.dra.cards);
}

TEST(Config, DraCardsIsAnyOrOneVariant) {
  EXPECT_EQ(ParseConfig("dra: {cards: fixed-online}")->dra.cards, "fixed-online");
  EXPECT_EQ(
      ParseConfig("dra: {cards: shared}").message(),
      "config: dra.cards must be one of any, fixed, guaranteed, native, fixed-online, guaranteed-online, "
      "whole, got \"shared\"");
}

}  // namespace
}  // namespace mgpu

namespace mgpu {
namespace {

TEST(Config, ListenAddressesParseOneWayEverywhere) {
  const auto ok = [](std::string_view address, const std::string& host, int port) {
    Result<HostPort> got = ParseHostPort(address, "x.listenAddress");
    ASSERT_TRUE(got.ok()) << address << ": " << got.message();
    EXPECT_EQ(got->host, host) << address;
    EXPECT_EQ(got->port, port) << address;
  };
  ok("0.0.0.0:8888", "0.0.0.0", 8888);
  ok("[::1]:9400", "::1", 9400);
  ok(":0", "", 0);
  for (std::string_view bad : {"8080", "host:", "host:80a", "host:65536", "::1:80", "host:-1"}) {
    Result<HostPort> got = ParseHostPort(bad, "x.listenAddress");
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_NE(got.message().find("x.listenAddress \"" + std::string(bad) + "\""), std::string::npos)
        << got.message();
  }
}

}  // namespace
}  // namespace mgpu

namespace mgpu {
namespace {

TEST(Config, ReadsTheDraKeys) {
  auto defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->device_plugin.mode, NodeMode::kDevicePlugin);
  EXPECT_EQ(defaults->dra.kubelet_root_dir, "/var/lib/kubelet");
  EXPECT_EQ(defaults->dra.cdi_directory, "/var/run/cdi");
  auto c = ParseConfig(R"(
devicePlugin: {mode: dra}
dra: {kubeletRootDir: /k, cdiDirectory: /etc/cdi, stateDirectory: /s, deviceRoot: /host/dev}
)");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->device_plugin.mode, NodeMode::kDra);
  EXPECT_EQ(c->dra.kubelet_root_dir, "/k");
  EXPECT_EQ(c->dra.cdi_directory, "/etc/cdi");
  EXPECT_EQ(c->dra.state_directory, "/s");
  EXPECT_EQ(c->dra.device_root, "/host/dev");

  auto bad_mode = ParseConfig("devicePlugin: {mode: both}");
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_NE(bad_mode.message().find("devicePlugin.mode must be one of device-plugin, dra"), std::string::npos)
      << bad_mode.message();
  auto relative = ParseConfig("dra: {cdiDirectory: cdi}");
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.message().find("dra.cdiDirectory must be an absolute path"), std::string::npos);
}

}  // namespace
}  // namespace mgpu
