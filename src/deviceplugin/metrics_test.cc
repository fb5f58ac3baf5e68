#include "deviceplugin/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>

#include "deviceplugin/devices.h"
#include "deviceplugin/pod_resources.h"
#include "kubelet/podresources/v1/api.pb.h"

namespace mgpu::dp {
namespace {

v1::ListPodResourcesResponse OnePod() {
  v1::ListPodResourcesResponse r;
  auto* pod = r.add_pod_resources();
  pod->set_namespace_("ml");
  pod->set_name("infer");
  auto* c = pod->add_containers();
  c->set_name("main");
  auto* core = c->add_devices();
  core->set_resource_name("mgpu.io/mgpu-core");
  for (int k = 0; k < 30; ++k) core->add_device_ids(DeviceId("GPU-a", Resource::kCore, k));
  auto* memory = c->add_devices();
  memory->set_resource_name("mgpu.io/mgpu-memory");
  for (int k = 0; k < 8; ++k) memory->add_device_ids(DeviceId("GPU-a", Resource::kMemory, k));
  auto* other = c->add_devices();
  other->set_resource_name("nvidia.com/gpu");
  other->add_device_ids("GPU-z");
  auto* cpu_only = r.add_pod_resources();
  cpu_only->set_name("web");
  cpu_only->add_containers()->set_name("nginx");
  return r;
}

TEST(PodResources, ReadsWhatTheKubeletAllocatedPerCard) {
  Config config;
  config.memory_unit_mib = 1024;
  auto pods = ReadAllocatedPods(OnePod(), config);
  ASSERT_EQ(pods.size(), 1u);
  const Assignment want{{{"main", {CardShare{"GPU-a", 30, 0, 8192}}}}};
  EXPECT_EQ(pods.at("ml/infer"), want);
}

TEST(Metrics, RendersCardsPodsAndCalls) {
  Config config;
  config.memory_unit_mib = 1024;
  MetricsSnapshot s{"node-1",
                    {{0, "GPU-a", "A10", 16384, true}, {1, "GPU-b", "A10", 16384, false}},
                    ReadAllocatedPods(OnePod(), config),
                    {{"mgpu.io/mgpu-core", CallCounts{3, 2, 1, 4, 0}}},
                    {}};
  const std::string text = RenderMetrics(s);
  const std::string card_a = "{node=\"node-1\",card=\"0\",uuid=\"GPU-a\",model=\"A10\"}";
  const std::string card_b = "{node=\"node-1\",card=\"1\",uuid=\"GPU-b\",model=\"A10\"}";
  EXPECT_NE(text.find("mgpu_card_healthy" + card_a + " 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_card_healthy" + card_b + " 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_card_core_allocated_percent" + card_a + " 30\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_card_memory_allocated_mib" + card_a + " 8192\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_card_memory_allocated_mib" + card_b + " 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_pod_gpu_share{node=\"node-1\",namespace=\"ml\",pod=\"infer\"} 0.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mgpu_plugin_allocate_total{node=\"node-1\",resource=\"mgpu.io/mgpu-core\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE mgpu_plugin_allocate_total counter\n"), std::string::npos);
}

TEST(Metrics, RendersTheGuardStateOfEachCard) {
  MetricsSnapshot s{
      "node-1", {{0, "GPU-a", "A10", 16384, true}, {1, "GPU-b", "A10", 16384, true}}, {}, {}, {}};
  guard::ContainerSnapshot online;
  online.token = "tok1";
  online.cap_bytes = 4ull << 30;
  online.used_bytes = 1ull << 30;
  online.processes = 2;
  online.launches = 90;
  online.throttled = 7;
  guard::ContainerSnapshot offline;
  offline.token = "tok2";
  offline.qos = guard::QosLevel::kOffline;
  offline.held_back = 3;
  offline.held_ns = 1'500'000'000;
  s.guard = {{"GPU-a", true, {"GPU-a", 80, {online, offline}}}, {"GPU-b", false, {}}};
  const std::string text = RenderMetrics(s);
  const std::string a = "node=\"node-1\",card=\"0\",uuid=\"GPU-a\"";
  EXPECT_NE(text.find("mgpu_guard_state_readable{" + a + "} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_guard_state_readable{node=\"node-1\",card=\"1\",uuid=\"GPU-b\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_card_utilization_percent{" + a + "} 80\n"), std::string::npos);
  const std::string tok1 = "{" + a + ",container=\"tok1\",qos=\"online\"} ";
  const std::string tok2 = "{" + a + ",container=\"tok2\",qos=\"offline\"} ";
  EXPECT_NE(text.find("mgpu_guard_container_memory_used_bytes" + tok1 + "1073741824\n"), std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_memory_cap_bytes" + tok1 + "4294967296\n"), std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_processes" + tok1 + "2\n"), std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_launches_throttled_total" + tok1 + "7\n"), std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_offline_held_back_total" + tok2 + "3\n"), std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_offline_held_back_seconds_total" + tok2 + "1.5\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE mgpu_guard_container_launches_total counter\n"), std::string::npos);
  EXPECT_EQ(RenderMetrics(MetricsSnapshot{"n", {}, {}, {}, {}}).find("mgpu_guard"), std::string::npos);
}

TEST(Metrics, RendersWhatTheGuardEnforcesOnEachContainer) {
  MetricsSnapshot s{"node-1", {{0, "GPU-a", "A10", 16384, true}}, {}, {}, {}};
  guard::ContainerSnapshot fixed;
  fixed.token = "fixed";
  fixed.share_percent = 30;
  fixed.credit = -25'000'000;  // a quarter second of the card owed
  guard::ContainerSnapshot native = fixed;
  native.token = "native";
  native.policy = guard::SharePolicy::kNativeBurstShare;
  guard::ContainerSnapshot blind = fixed;
  blind.token = "blind";
  blind.share_measured = false;  // no NVML in its processes
  guard::ContainerSnapshot offline;
  offline.token = "offline";
  offline.qos = guard::QosLevel::kOffline;
  offline.policy = guard::SharePolicy::kNativeBurstShare;
  offline.share_percent = 40;
  offline.release_ns = 10'000'000;
  s.guard = {{"GPU-a", true, {"GPU-a", 80, {fixed, native, blind, offline}}}};
  const std::string text = RenderMetrics(s);
  const std::string a = "{node=\"node-1\",card=\"0\",uuid=\"GPU-a\",container=";
  EXPECT_NE(text.find("mgpu_guard_container_compute_share_percent" + a +
                      "\"fixed\",qos=\"online\",policy=\"fixed-share\"} 30\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mgpu_guard_container_compute_share_enforced" + a + "\"fixed\",qos=\"online\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_compute_share_enforced" + a + "\"native\",qos=\"online\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_compute_share_enforced" + a + "\"blind\",qos=\"online\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("mgpu_guard_container_compute_share_enforced" + a + "\"offline\",qos=\"offline\"} 1\n"),
            std::string::npos);
  EXPECT_NE(
      text.find("mgpu_guard_container_compute_budget_seconds" + a + "\"fixed\",qos=\"online\"} -0.25\n"),
      std::string::npos);
  EXPECT_NE(
      text.find("mgpu_guard_container_offline_release_seconds" + a + "\"offline\",qos=\"offline\"} 0.01\n"),
      std::string::npos);
}

TEST(MetricsServer, ServesMetricsAndHealthz) {
  std::atomic<bool> healthy{false};
  MetricsServer server(
      [] {
        return MetricsSnapshot{"n", {{0, "GPU-a", "A10", 1, true}}, {}, {}, {}};
      },
      [&] { return healthy.load(); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client client("127.0.0.1", server.Port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("mgpu_card_healthy{"), std::string::npos);
  auto down = client.Get("/healthz");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->status, 503);
  healthy = true;
  auto up = client.Get("/healthz");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->status, 200);
  server.Stop();
  EXPECT_FALSE(server.Start("no-port").ok());
}

}  // namespace
}  // namespace mgpu::dp
