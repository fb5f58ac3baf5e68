// The plugin served over real unix sockets to the fake kubelet: registration, kubelet restarts, admission the
// way the kubelet does it, the environment of each isolation backend, health changes and the 4 MiB guard.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "deviceplugin/device_list.h"
#include "deviceplugin/plugin.h"
#include "deviceplugin/pod_resources.h"
#include "node/health.h"
#include "node/static_backend.h"
#include "testing/fake_kubelet.h"

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using Devices = std::map<std::string, std::string>;
constexpr auto kWait = 20s;

std::vector<Card> TwoCards() {
  return {{0, "GPU-aaaa", "NVIDIA A10", 8192, true}, {1, "GPU-bbbb", "NVIDIA A10", 8192, true}};
}

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/mgpu-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    root_ = dir;
    std::filesystem::create_directory(root_ / "dp");
    config_.memory_unit_mib = 1024;
    config_.device_plugin.device_plugin_dir = (root_ / "dp").string();
    config_.device_plugin.pod_resources_socket = (root_ / "pr.sock").string();
    config_.device_plugin.pod_resources_poll_ms = 20;
    kubelet_ = std::make_unique<test::FakeKubelet>(config_.device_plugin.device_plugin_dir,
                                                   config_.device_plugin.pod_resources_socket);
  }

  void TearDown() override {
    health_.reset();
    plugin_.reset();
    kubelet_.reset();
    std::filesystem::remove_all(root_);
  }

  // Plugin over `cards`; `pods` as the API-server side would feed it.
  Status StartPlugin(std::vector<Card> cards = TwoCards(), PendingPods* pods = nullptr) {
    backend_ = std::make_unique<node::StaticBackend>(cards);
    state_ = std::make_unique<node::DeviceState>(cards);
    plugin_ = std::make_unique<DevicePlugin>(config_, *state_, hand_off_, pods);
    health_ = std::make_unique<node::HealthWatcher>(*backend_, *state_);
    health_->Start();
    return plugin_->Start();
  }

  std::string Name(Resource r) const { return FullName(r, config_.Names()); }

  void ExpectListsOf(size_t core, size_t memory) {
    for (Resource r : kAllResources) {
      const size_t want = r == Resource::kMemory ? memory : core;
      EXPECT_TRUE(kubelet_->WaitForLists(
          Name(r), [&](const Devices& d) { return d.size() == want; }, kWait))
          << Name(r) << " has " << kubelet_->Devices(Name(r)).size();
    }
  }

  std::filesystem::path root_;
  Config config_;
  std::unique_ptr<test::FakeKubelet> kubelet_;
  std::unique_ptr<node::StaticBackend> backend_;
  std::unique_ptr<node::DeviceState> state_;
  HandOff hand_off_;
  std::unique_ptr<DevicePlugin> plugin_;
  std::unique_ptr<node::HealthWatcher> health_;
};

TEST_F(PluginTest, ServesThenRegistersEveryResource) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  std::set<std::string> names;
  for (const auto& r : kubelet_->Registrations()) {
    EXPECT_EQ(r.version, "v1beta1");
    EXPECT_TRUE(r.preferred_allocation_available);
    EXPECT_EQ(r.endpoint.find('/'), std::string::npos) << r.endpoint;
    EXPECT_TRUE(std::filesystem::exists(root_ / "dp" / r.endpoint)) << r.endpoint;
    names.insert(r.resource_name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"mgpu.io/mgpu-core", "mgpu.io/mgpu-memory",
                                          "mgpu.io/reclaimed-mgpu-core"}));
  ExpectListsOf(200, 16);
  EXPECT_EQ(kubelet_->Devices(Name(Resource::kMemory)).count("GPU-bbbb-m7"), 1u);
  EXPECT_TRUE(plugin_->Registered());
}

TEST_F(PluginTest, WaitsForAKubeletThatStartsLater) {
  ASSERT_TRUE(StartPlugin().ok());
  EXPECT_FALSE(plugin_->Registered());
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
}

TEST_F(PluginTest, RegistersAgainAfterTheKubeletRestarts) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  for (int restart = 1; restart <= 2; ++restart) {
    ASSERT_TRUE(kubelet_->Restart().ok());
    ASSERT_TRUE(kubelet_->WaitForRegistrations(3 * (restart + 1), kWait)) << "restart " << restart;
    ExpectListsOf(200, 16);
    for (Resource r : kAllResources) EXPECT_TRUE(std::filesystem::exists(plugin_->SocketPath(r)));
  }
  std::mt19937 rng(7);
  auto admitted = kubelet_->Admit("ns", "after-restart", "main",
                                  {{Name(Resource::kCore), 10}, {Name(Resource::kMemory), 1}}, rng);
  EXPECT_TRUE(admitted.ok()) << admitted.message();
}

TEST_F(PluginTest, AdmitsContainersLikeTheKubeletWithCoreAndMemoryOnOneCard) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
  PodResourcesPoller pod_resources(config_);
  pod_resources.Start();
  std::mt19937 rng(42);
  std::set<std::string> orders;
  // 8 containers of 25% and 2 GiB: binpack fills one card, then the other. (Without the extender, core
  // and memory of a container share a card only when the first resource's choice leaves room for the
  // second: here both run out together.)
  for (int i = 0; i < 8; ++i) {
    const std::string pod = "pod-" + std::to_string(i);
    auto a =
        kubelet_->Admit("ns", pod, "main", {{Name(Resource::kCore), 25}, {Name(Resource::kMemory), 2}}, rng);
    ASSERT_TRUE(a.ok()) << pod << ": " << a.message();
    EXPECT_TRUE(a->env_conflicts.empty()) << pod << " got contradicting responses";
    EXPECT_EQ(a->envs["MGPU_CORE_PERCENT"], "25");
    EXPECT_EQ(a->envs["MGPU_MEMORY_MIB"], "2048");
    EXPECT_EQ(a->envs["MGPU_QOS_LEVEL"], "online");
    EXPECT_EQ(a->envs["NVIDIA_VISIBLE_DEVICES"], i < 4 ? "GPU-aaaa" : "GPU-bbbb") << pod;
    orders.insert(a->order.front());
  }
  EXPECT_EQ(orders.size(), 2u) << "resources should come in both orders";
  // Memory is all taken: the plugin refuses with a reason instead of a wrong card.
  auto full = kubelet_->Admit("ns", "too-big", "main", {{Name(Resource::kMemory), 1}}, rng);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.message().find("no card can take"), std::string::npos) << full.message();

  // The kubelet's PodResources shows what was really allocated: an answer to a List started after the last
  // admission (an earlier one may have been taken between a pod's two resources).
  const uint64_t after = pod_resources.RequestsStarted();
  AllocatedPods seen;
  uint64_t request = 0;
  for (auto deadline = std::chrono::steady_clock::now() + kWait;
       std::chrono::steady_clock::now() < deadline;) {
    seen = pod_resources.Latest(&request);
    if (request > after) break;
    std::this_thread::sleep_for(2ms);  // polling a condition until the deadline, not a timing assumption
  }
  ASSERT_GT(request, after) << "no PodResources answer after the admissions";
  ASSERT_EQ(seen.size(), 8u);
  const auto usage = UsageByCard(seen);
  EXPECT_EQ(usage.at("GPU-aaaa").core, 100);
  EXPECT_EQ(usage.at("GPU-bbbb").core, 100);
  EXPECT_EQ(usage.at("GPU-aaaa").memory_mib, 8192);
  EXPECT_EQ(usage.at("GPU-bbbb").memory_mib, 8192);
  EXPECT_EQ(plugin_->Counts(Resource::kCore).allocate, 8u);
  EXPECT_EQ(plugin_->Counts(Resource::kMemory).preferred_errors, 1u);
  EXPECT_EQ(plugin_->Counts(Resource::kCore).split + plugin_->Counts(Resource::kMemory).split, 0u);
}

TEST_F(PluginTest, OfflineContainersGetReclaimedCoreAndTheirQos) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
  std::mt19937 rng(9);
  auto offline = kubelet_->Admit("ns", "batch", "main",
                                 {{Name(Resource::kReclaimedCore), 50}, {Name(Resource::kMemory), 1}}, rng);
  ASSERT_TRUE(offline.ok()) << offline.message();
  EXPECT_EQ(offline->envs["MGPU_QOS_LEVEL"], "offline");
  EXPECT_EQ(offline->envs["MGPU_RECLAIMED_CORE_PERCENT"], "50");
  EXPECT_EQ(offline->envs["MGPU_MEMORY_MIB"], "1024");
  EXPECT_FALSE(offline->envs.count("MGPU_CORE_PERCENT"));
  EXPECT_TRUE(offline->env_conflicts.empty());
}

// One pending container, always: the API-server side reduced to what the servers ask of it.
class OnePendingContainer : public PendingPods {
 public:
  explicit OnePendingContainer(PendingContainer c) : container_(std::move(c)) {}
  std::vector<PendingContainer> Candidates(Resource, int64_t) override { return {container_}; }
  void Refused(Resource, const PendingContainer*, const std::string&) override {}

 private:
  const PendingContainer container_;
};

TEST_F(PluginTest, PendingPodsAssignmentDecidesTheCards) {
  ASSERT_TRUE(kubelet_->Start().ok());
  // The extender put this container on card 1, where the allocator alone would choose card 0.
  OnePendingContainer pods({"ns/assigned", "main", {CardShare{"GPU-bbbb", 20, 0, 2048}}, 1, "uid-assigned"});
  ASSERT_TRUE(StartPlugin(TwoCards(), &pods).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
  std::mt19937 rng(1);
  auto a = kubelet_->Admit("ns", "assigned", "main",
                           {{Name(Resource::kCore), 20}, {Name(Resource::kMemory), 2}}, rng);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], "GPU-bbbb");
  EXPECT_EQ(plugin_->Counts(Resource::kCore).preferred_matched, 1u);
  EXPECT_EQ(plugin_->Counts(Resource::kMemory).preferred_matched, 1u);
  // Each Allocate is handed out to the container its preference was matched to.
  const HandedOutCards handed = hand_off_.Unsettled(0);
  EXPECT_EQ(handed.size(), 2u);
  for (const auto& [to, cards] : handed) {
    EXPECT_EQ(to.pod_uid, "uid-assigned");
    EXPECT_EQ(to.container, "main");
    EXPECT_EQ(cards, CardSet{"GPU-bbbb"});
  }
}

class IsolationTest : public PluginTest, public ::testing::WithParamInterface<IsolationBackend> {};

TEST_P(IsolationTest, MergedEnvironmentOfTheBackend) {
  config_.isolation.backend = GetParam();
  config_.isolation.hami_library_path = "/usr/local/vgpu/libvgpu.so";
  config_.isolation.mps_pipe_directory = "/run/nvidia-mps";
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
  std::mt19937 rng(3);
  auto a =
      kubelet_->Admit("ns", "p", "main", {{Name(Resource::kCore), 200}, {Name(Resource::kMemory), 8}}, rng);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_TRUE(a->env_conflicts.empty());
  std::map<std::string, std::string> want = {{"NVIDIA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb"},
                                             {"MGPU_VISIBLE_CARDS", "GPU-aaaa,GPU-bbbb"},
                                             {"MGPU_CORE_PERCENT", "100"},
                                             {"MGPU_MEMORY_MIB", "4096"},
                                             {"MGPU_QOS_LEVEL", "online"},
                                             {"MGPU_COMPUTE_POLICY", "fixed-share"}};
  size_t mounts = 0;
  switch (GetParam()) {
    case IsolationBackend::kNone:
      break;
    case IsolationBackend::kHamiCore:
      want["CUDA_DEVICE_MEMORY_LIMIT_0"] = "4096m";
      want["CUDA_DEVICE_MEMORY_LIMIT_1"] = "4096m";
      want["CUDA_DEVICE_SM_LIMIT"] = "100";
      mounts = 2;
      break;
    case IsolationBackend::kMps:
      want["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100";
      want["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=4096M,1=4096M";
      want["CUDA_MPS_PIPE_DIRECTORY"] = "/run/nvidia-mps";
      mounts = 1;
      break;
    case IsolationBackend::kMgpu:
      want["MGPU_GUARD_STATE_DIR"] = config_.isolation.guard_state_directory;
      want["MGPU_CONTAINER_TOKEN"] = a->envs["MGPU_CONTAINER_TOKEN"];  // random, from mgpu-memory alone
      EXPECT_EQ(want["MGPU_CONTAINER_TOKEN"].size(), 32u);
      mounts = 4;  // the guard, ld.so.preload, the state directory of each of the two cards
      break;
  }
  EXPECT_EQ(a->envs, want);
  ASSERT_EQ(a->mounts.size(), mounts);
  if (GetParam() == IsolationBackend::kHamiCore) {
    EXPECT_EQ(a->mounts[1].container_path, "/etc/ld.so.preload");
    EXPECT_EQ(a->mounts[1].host_path, "/usr/local/vgpu/ld.so.preload");
    EXPECT_TRUE(a->mounts[1].read_only);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, IsolationTest,
                         ::testing::Values(IsolationBackend::kNone, IsolationBackend::kHamiCore,
                                           IsolationBackend::kMps, IsolationBackend::kMgpu),
                         [](const auto& info) {
                           return std::string(info.param == IsolationBackend::kNone       ? "None"
                                              : info.param == IsolationBackend::kHamiCore ? "HamiCore"
                                              : info.param == IsolationBackend::kMps      ? "Mps"
                                                                                          : "Mgpu");
                         });

TEST_F(PluginTest, HealthChangesStreamToEveryResource) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  ExpectListsOf(200, 16);
  const auto health_of = [](const Devices& d, const std::string& prefix) {
    std::set<std::string> seen;
    for (const auto& [id, health] : d) {
      if (id.starts_with(prefix)) seen.insert(health);
    }
    return seen;
  };
  backend_->SetHealthy("GPU-bbbb", false, "XID 79");
  for (Resource r : kAllResources) {
    EXPECT_TRUE(kubelet_->WaitForLists(
        Name(r),
        [&](const Devices& d) {
          return health_of(d, "GPU-bbbb-") == std::set<std::string>{"Unhealthy"} &&
                 health_of(d, "GPU-aaaa-") == std::set<std::string>{"Healthy"};
        },
        kWait))
        << Name(r);
  }
  // New work goes to the healthy card only; a whole-card ask that needs both fails with a reason.
  std::mt19937 rng(5);
  auto ok =
      kubelet_->Admit("ns", "a", "main", {{Name(Resource::kCore), 50}, {Name(Resource::kMemory), 1}}, rng);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->envs["MGPU_VISIBLE_CARDS"], "GPU-aaaa");
  EXPECT_FALSE(kubelet_->Admit("ns", "b", "main", {{Name(Resource::kCore), 200}}, rng).ok());

  backend_->SetHealthy("GPU-bbbb", true, "recovered");
  EXPECT_TRUE(kubelet_->WaitForLists(
      Name(Resource::kMemory),
      [&](const Devices& d) { return health_of(d, "GPU-bbbb-") == std::set<std::string>{"Healthy"}; },
      kWait));
}

std::vector<Card> EightA100s() {
  std::vector<Card> cards;
  for (int i = 0; i < 8; ++i) {
    cards.push_back(Card{i, "GPU-" + std::to_string(i) + "e2c8a3f-5d1b-4c2e-9f8a-7b6c5d4e3f2a",
                         "NVIDIA A100-SXM4-80GB", 81920, true});
  }
  return cards;
}

TEST_F(PluginTest, RefusesAListOverFourMiBAndServesAtTheSuggestedUnit) {
  config_.memory_unit_mib = 1;
  Status refused = StartPlugin(EightA100s());
  ASSERT_FALSE(refused.ok());
  const std::string key = "set memoryUnitMiB to ";
  const size_t at = refused.message().find(key);
  ASSERT_NE(at, std::string::npos) << refused.message();
  const int64_t unit = std::stoll(refused.message().substr(at + key.size()));
  EXPECT_GT(unit, 1);
  health_.reset();
  plugin_.reset();

  config_.memory_unit_mib = unit;
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(StartPlugin(EightA100s()).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, kWait));
  const size_t per_card = 81920 / unit;
  ExpectListsOf(800, 8 * per_card);
  EXPECT_LT(kubelet_->LastListBytes(Name(Resource::kMemory)), kMaxListAndWatchBytes);
}

}  // namespace
}  // namespace mgpu::dp
