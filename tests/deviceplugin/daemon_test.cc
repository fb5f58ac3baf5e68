// The whole plugin of one node (dp::Daemon) exactly as on a node: the fake kubelet calls it over real unix
// sockets and the fake API server holds the pods and the node. The extender's part is played by the tests:
// they create pods bound to the node with the D/gpu-assignment its bind writes.
#include "deviceplugin/daemon.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <random>
#include <thread>

#include "common/codec.h"
#include "deviceplugin/node_pods.h"
#include "node/static_backend.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_kubelet.h"
#include "testing/test_env.h"

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::TempDir;
using testing::WaitUntil;

constexpr auto kWait = 20s;
constexpr char kNode[] = "node-a";
constexpr char kCardA[] = "GPU-aaaa";
constexpr char kCardB[] = "GPU-bbbb";
const ResourceNames kNames = Config().Names();

std::vector<Card> TwoCards() {
  return {{0, kCardA, "NVIDIA A10", 8192, true}, {1, kCardB, "NVIDIA A10", 8192, true}};
}

struct ContainerSpec {
  std::string name;
  int core = 0;
  int64_t memory_units = 0;  // of 1 GiB (the tests' memoryUnitMiB)
  std::string card;          // the assigned card; empty: no assignment
};

// A pod bound to `node` as the extender's bind leaves it: D/gpu-assignment (when the containers name cards)
// and D/gpu-assume-time.
json BoundPod(const std::string& name, const std::vector<ContainerSpec>& containers, int64_t assume_ns = 1,
              const std::string& node = kNode) {
  json specs = json::array();
  Assignment assignment;
  for (const ContainerSpec& c : containers) {
    specs.push_back(
        {{"name", c.name},
         {"image", "cuda"},
         {"resources",
          {{"limits",
            {{kNames.core, std::to_string(c.core)}, {kNames.memory, std::to_string(c.memory_units)}}}}}});
    if (!c.card.empty())
      assignment.containers.push_back({c.name, {CardShare{c.card, c.core, 0, c.memory_units * 1024}}});
  }
  json pod = {{"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", {{"nodeName", node}, {"containers", specs}}},
              {"status", {{"phase", "Pending"}}}};
  if (!assignment.containers.empty()) {
    pod["metadata"]["annotations"] = {{kNames.gpu_assignment, EncodeAssignment(assignment)},
                                      {kNames.gpu_assume_time, EncodeAssumeTime(assume_ns)}};
  }
  return pod;
}

Assignment OneContainer(const std::string& container, const std::string& card, int core, int64_t units) {
  return Assignment{{ContainerAssignment{container, {CardShare{card, core, 0, units * 1024}}}}};
}

// One simulated node: its folder, fake kubelet and daemon.
struct Node {
  Node(const std::string& name, const std::string& api_url, Config config) : name(name), api_url(api_url) {
    std::filesystem::create_directory(dir.path() + "/dp");
    config.device_plugin.device_plugin_dir = dir.path() + "/dp";
    config.device_plugin.pod_resources_socket = dir.path() + "/pod-resources.sock";
    config.isolation.backend = IsolationBackend::kNone;  // the guard's set-up: isolation_setup_test.cc
    this->config = std::move(config);
    kubelet = std::make_unique<test::FakeKubelet>(this->config.device_plugin.device_plugin_dir,
                                                  this->config.device_plugin.pod_resources_socket);
  }

  // Starts (or restarts) the daemon and waits until the kubelet follows its three lists.
  ::testing::AssertionResult StartDaemon() {
    daemon.reset();
    const size_t registered = kubelet->Registrations().size();
    auto owned = std::make_unique<node::StaticBackend>(TwoCards());
    backend = owned.get();
    daemon = std::make_unique<Daemon>(config, name, std::move(owned));
    kube::ClusterConfig cluster;
    cluster.server = api_url;
    if (Status s = daemon->Start(cluster); !s.ok()) return ::testing::AssertionFailure() << s.message();
    if (!kubelet->WaitForRegistrations(registered + 3, kWait))
      return ::testing::AssertionFailure() << "the plugin did not register";
    if (!WaitUntil([&] { return daemon->Synced(); }, kWait))
      return ::testing::AssertionFailure() << "the pod watch or PodResources never answered";
    for (Resource r : kAllResources) {
      if (!kubelet->WaitForLists(
              FullName(r, kNames), [](const auto& devices) { return !devices.empty(); }, kWait))
        return ::testing::AssertionFailure() << "no device list of " << FullName(r, kNames);
    }
    return ::testing::AssertionSuccess();
  }

  const std::string name;
  const std::string api_url;
  TempDir dir;
  Config config;
  std::unique_ptr<test::FakeKubelet> kubelet;
  node::StaticBackend* backend = nullptr;  // owned by the daemon
  std::unique_ptr<Daemon> daemon;
};

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    ASSERT_TRUE(api_.Create("nodes", {{"metadata", {{"name", kNode}}}}).ok());
    config_.memory_unit_mib = 1024;
    config_.device_plugin.pod_resources_poll_ms = 20;
    config_.device_plugin.pending_pod_wait_ms = 1000;
    config_.device_plugin.metrics_address = "127.0.0.1:0";
  }

  // Starts the fake kubelet and the daemon of kNode under config_.
  void StartNode() {
    node_ = std::make_unique<Node>(kNode, api_.url(), config_);
    ASSERT_TRUE(node_->kubelet->Start().ok());
    ASSERT_TRUE(node_->StartDaemon());
  }

  void TearDown() override { node_.reset(); }

  Result<test::FakeKubelet::Admission> Admit(const std::string& pod, const std::string& container, int core,
                                             int64_t memory_units) {
    std::map<std::string, int64_t> resources;
    if (core) resources[kNames.core] = core;
    if (memory_units) resources[kNames.memory] = memory_units;
    return node_->kubelet->Admit("default", pod, container, resources, rng_);
  }

  json StoredPod(const std::string& name) { return api_.Get("pods", "default", name).value_or(json()); }

  // The node's D/gpu-inventory as the API server holds it, if readable.
  std::optional<NodeInventory> Inventory() {
    const json node = api_.Get("nodes", "", kNode).value_or(json());
    const json annotations = node["metadata"].value("annotations", json::object());
    if (!annotations.contains(kNames.gpu_inventory)) return std::nullopt;
    Result<NodeInventory> i = DecodeInventory(annotations[kNames.gpu_inventory].get<std::string>());
    if (!i.ok()) return std::nullopt;
    return *i;
  }

  std::optional<Assignment> AllocatedOf(const std::string& pod) {
    const json p = StoredPod(pod);
    const json annotations = p["metadata"].value("annotations", json::object());
    if (!annotations.contains(kNames.gpu_allocated)) return std::nullopt;
    Result<Assignment> a = DecodeAssignment(annotations[kNames.gpu_allocated].get<std::string>());
    if (!a.ok()) return std::nullopt;
    return *a;
  }

  bool WaitForAllocated(const std::string& pod, const Assignment& want) {
    return WaitUntil([&] { return AllocatedOf(pod) == want; }, kWait);
  }

  // What the pod says it holds, in the plugin's order (Normalized): its gpu-allocated, else its assignment
  // (the plugin writes gpu-allocated only where the kubelet's devices differ from the assignment).
  std::optional<Assignment> HeldOf(const std::string& pod) {
    if (std::optional<Assignment> allocated = AllocatedOf(pod)) return allocated;
    const json annotations = StoredPod(pod)["metadata"].value("annotations", json::object());
    if (!annotations.contains(kNames.gpu_assignment)) return std::nullopt;
    Result<Assignment> a = DecodeAssignment(annotations[kNames.gpu_assignment].get<std::string>());
    return a.ok() ? std::optional<Assignment>(Normalized(*a)) : std::nullopt;
  }

  // The plugin has reconciled a few of the kubelet's PodResources answers since now, and the pod holds
  // `want` (writing gpu-allocated first where the kubelet gave it other cards than assigned).
  bool WaitForHeld(const std::string& pod, const Assignment& want) {
    WaitForPolls(3);
    return WaitUntil([&] { return HeldOf(pod) == want; }, kWait);
  }

  std::vector<json> Events(const std::string& reason, const std::string& involved) {
    std::vector<json> out;
    for (const json& e : api_.List("events", "default")) {
      if (e["reason"] == reason && e["involvedObject"]["name"] == involved) out.push_back(e);
    }
    return out;
  }

  // PATCH requests on one pod so far.
  size_t PatchesOf(const std::string& pod) {
    size_t n = 0;
    for (const auto& r : api_.requests())
      n += r.method == "PATCH" && r.path == "/api/v1/namespaces/default/pods/" + pod;
    return n;
  }

  // Lets the plugin poll PodResources `n` more times.
  void WaitForPolls(size_t n) {
    const size_t from = node_->kubelet->PodResourcesLists();
    ASSERT_TRUE(WaitUntil([&] { return node_->kubelet->PodResourcesLists() >= from + n; }, kWait));
  }

  testing::FakeApiServer api_;
  Config config_;
  std::unique_ptr<Node> node_;
  std::mt19937 rng_{42};
};

TEST_F(DaemonTest, AssignedCardsWhateverTheOrderOfTheKubeletsCalls) {
  StartNode();
  // Alternate cards so that the allocator alone (binpack, lowest index first) would choose the other card
  // every time.
  std::set<std::string> orders;
  for (int i = 0; i < 8; ++i) {
    const std::string pod = "p" + std::to_string(i);
    const std::string card = i % 2 == 0 ? kCardB : kCardA;
    ASSERT_TRUE(api_.Create("pods", BoundPod(pod, {{"main", 10, 1, card}}, 100 + i)).ok());
    auto a = Admit(pod, "main", 10, 1);
    ASSERT_TRUE(a.ok()) << pod << ": " << a.message();
    EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], card) << pod;
    EXPECT_TRUE(a->env_conflicts.empty()) << pod;
    orders.insert(a->order.front());
    EXPECT_TRUE(WaitForHeld(pod, OneContainer("main", card, 10, 1))) << pod;
    EXPECT_EQ(PatchesOf(pod), 0u) << pod << " got its assigned cards: nothing to write";
  }
  EXPECT_EQ(orders.size(), 2u) << "the kubelet's calls should come in both orders";
  EXPECT_EQ(node_->daemon->Counts(Resource::kCore).preferred_matched, 8u);
  EXPECT_EQ(node_->daemon->Counts(Resource::kMemory).preferred_matched, 8u);
}

TEST_F(DaemonTest, TwoContainersOfOnePodEachGetTheirOwnCards) {
  StartNode();
  // The same shape on different cards; the kubelet admits in spec order, which is not alphabetical here.
  ASSERT_TRUE(api_.Create("pods", BoundPod("two", {{"zeta", 30, 2, kCardB}, {"alpha", 30, 2, kCardA}})).ok());
  auto zeta = Admit("two", "zeta", 30, 2);
  ASSERT_TRUE(zeta.ok()) << zeta.message();
  auto alpha = Admit("two", "alpha", 30, 2);
  ASSERT_TRUE(alpha.ok()) << alpha.message();
  EXPECT_EQ(zeta->envs["MGPU_VISIBLE_CARDS"], kCardB);
  EXPECT_EQ(alpha->envs["MGPU_VISIBLE_CARDS"], kCardA);
  Assignment both = OneContainer("alpha", kCardA, 30, 2);
  both.containers.push_back(OneContainer("zeta", kCardB, 30, 2).containers.front());
  EXPECT_TRUE(WaitForHeld("two", both));
}

TEST_F(DaemonTest, IdenticalPodsInFlightTogetherFillTheirCard) {
  StartNode();
  // Four identical pods bound at once, all to card B: whichever the plugin matches first, each gets card B.
  std::vector<std::string> pods = {"same-0", "same-1", "same-2", "same-3"};
  for (size_t i = 0; i < pods.size(); ++i)
    ASSERT_TRUE(api_.Create("pods", BoundPod(pods[i], {{"main", 25, 2, kCardB}}, 10 + i)).ok());
  std::shuffle(pods.begin(), pods.end(), rng_);
  for (const std::string& pod : pods) {
    auto a = Admit(pod, "main", 25, 2);
    ASSERT_TRUE(a.ok()) << pod << ": " << a.message();
    EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardB) << pod;
  }
  for (const std::string& pod : pods)
    EXPECT_TRUE(WaitForHeld(pod, OneContainer("main", kCardB, 25, 2))) << pod;
  EXPECT_EQ(node_->daemon->Counts(Resource::kCore).split + node_->daemon->Counts(Resource::kMemory).split,
            0u);
}

TEST_F(DaemonTest, WaitsForAPodTheApiServerShowsOnlyAfterTheKubeletsCall) {
  StartNode();
  const size_t preferred_before =
      node_->daemon->Counts(Resource::kCore).preferred + node_->daemon->Counts(Resource::kMemory).preferred;
  Result<test::FakeKubelet::Admission> admitted = Error{"not run"};
  std::thread kubelet([&] { admitted = Admit("late", "main", 40, 3); });
  // The kubelet's first call is in the plugin, and the pod is nowhere yet.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return node_->daemon->Counts(Resource::kCore).preferred +
                   node_->daemon->Counts(Resource::kMemory).preferred >
               preferred_before;
      },
      kWait));
  ASSERT_TRUE(api_.Create("pods", BoundPod("late", {{"main", 40, 3, kCardB}})).ok());
  kubelet.join();
  ASSERT_TRUE(admitted.ok()) << admitted.message();
  EXPECT_EQ(admitted->envs["MGPU_VISIBLE_CARDS"], kCardB);
  size_t lists = 0;
  for (const auto& r : api_.requests()) {
    auto selector = r.params.find("fieldSelector");
    lists += r.method == "GET" && r.path == "/api/v1/pods" && !r.watch && selector != r.params.end() &&
             selector->second == std::string("spec.nodeName=") + kNode;
  }
  EXPECT_GE(lists, 2u) << "the informer's list and at least one re-list of the node's pods";
}

TEST_F(DaemonTest, PodsWithoutAnAssignmentGetTheAllocatorsChoiceWithoutWaiting) {
  // Were the plugin to wait out this bound for a pod scheduled without the extender, the kubelet's call
  // would time out.
  config_.device_plugin.pending_pod_wait_ms = 600000;
  StartNode();
  ASSERT_TRUE(api_.Create("pods", BoundPod("plain", {{"main", 50, 4, ""}})).ok());
  ASSERT_TRUE(WaitUntil([&] { return node_->daemon->Synced(); }));
  auto a = Admit("plain", "main", 50, 4);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardA);  // binpack, lowest index first
  EXPECT_EQ(node_->daemon->Counts(Resource::kCore).preferred_matched, 0u);
  EXPECT_TRUE(WaitForAllocated("plain", OneContainer("main", kCardA, 50, 4)));
}

TEST_F(DaemonTest, AUnknownPodGetsTheAllocatorsChoiceAfterTheBoundedWait) {
  config_.device_plugin.pending_pod_wait_ms = 200;
  StartNode();
  auto a = Admit("ghost", "main", 50, 4);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardA);
}

TEST_F(DaemonTest, WritesGpuAllocatedOnlyOnceTheContainerHoldsEverything) {
  StartNode();
  // No assignment (scheduled without the extender): the plugin chooses, and gpu-allocated says what.
  ASSERT_TRUE(api_.Create("pods", BoundPod("half", {{"main", 20, 2, ""}})).ok());
  ASSERT_TRUE(WaitUntil([&] { return node_->daemon->Synced(); }));
  ASSERT_TRUE(Admit("half", "main", 20, 0).ok());  // the kubelet has admitted mgpu-core only, so far
  WaitForPolls(5);
  EXPECT_EQ(AllocatedOf("half"), std::nullopt) << "a partial allocation would undercount memory";
  auto rest = Admit("half", "main", 0, 2);
  ASSERT_TRUE(rest.ok()) << rest.message();
  EXPECT_EQ(rest->envs["MGPU_VISIBLE_CARDS"], kCardA);  // binpack, lowest index first
  EXPECT_TRUE(WaitForAllocated("half", OneContainer("main", kCardA, 20, 2)));
  // Written once; later polls find it unchanged.
  WaitForPolls(5);
  EXPECT_EQ(PatchesOf("half"), 1u);
}

TEST_F(DaemonTest, AnAssignedCardThatTurnedUnhealthyIsReplacedAndTheDifferenceReported) {
  StartNode();
  ASSERT_TRUE(api_.Create("pods", BoundPod("moved", {{"main", 20, 2, kCardB}})).ok());
  node_->backend->SetHealthy(kCardB, false, "XID 79");
  for (Resource r : kAllResources) {
    ASSERT_TRUE(node_->kubelet->WaitForLists(
        FullName(r, kNames),
        [](const auto& devices) {
          return std::all_of(devices.begin(), devices.end(), [](const auto& d) {
            return !d.first.starts_with("GPU-bbbb-") || d.second == "Unhealthy";
          });
        },
        kWait));
  }
  auto a = Admit("moved", "main", 20, 2);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardA);
  EXPECT_TRUE(WaitForAllocated("moved", OneContainer("main", kCardA, 20, 2)));
  EXPECT_TRUE(WaitUntil([&] { return Events("GPUAllocationDiffers", "moved").size() == 1; }));
}

TEST_F(DaemonTest, CorrectsAGpuAllocatedThatDisagreesWithTheKubelet) {
  StartNode();
  json pod = BoundPod("wrong", {{"main", 20, 2, kCardB}});
  pod["metadata"]["annotations"][kNames.gpu_allocated] =
      EncodeAssignment(OneContainer("main", kCardA, 20, 2));
  ASSERT_TRUE(api_.Create("pods", pod).ok());
  ASSERT_TRUE(Admit("wrong", "main", 20, 2).ok());
  EXPECT_TRUE(WaitForAllocated("wrong", OneContainer("main", kCardB, 20, 2)));
}

TEST_F(DaemonTest, PublishesTheNodeAndUpdatesItOnAHealthChange) {
  config_.device_plugin.node_heartbeat_seconds = 1;
  StartNode();
  const auto inventory = [&] { return Inventory(); };
  ASSERT_TRUE(WaitUntil([&] { return inventory().has_value(); }, kWait));
  NodeInventory first = *inventory();
  EXPECT_EQ(first.cards, TwoCards());
  EXPECT_EQ(first.memory_unit_mib, 1024);
  EXPECT_EQ(first.isolation, IsolationBackend::kNone);
  EXPECT_FALSE(first.version.empty());
  EXPECT_GT(first.heartbeat, 0);
  const json labels = api_.Get("nodes", "", kNode).value_or(json())["metadata"]["labels"];
  EXPECT_EQ(labels[kNames.label_product], "NVIDIA-A10");
  EXPECT_EQ(labels[kNames.label_count], "2");
  EXPECT_EQ(labels[kNames.label_memory], "8192");

  node_->backend->SetHealthy(kCardB, false, "XID 79");
  ASSERT_TRUE(WaitUntil([&] { return inventory() && !inventory()->cards[1].healthy; }, kWait));
  EXPECT_TRUE(inventory()->cards[0].healthy);
  // The heartbeat moves on without any change.
  const int64_t beat = inventory()->heartbeat;
  EXPECT_TRUE(WaitUntil([&] { return inventory() && inventory()->heartbeat > beat; }, kWait));

  // Two whole cards cannot be had with one unhealthy: the refusal is an Event on the node.
  auto refused = Admit("whole", "main", 200, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(WaitUntil([&] { return !Events("GPUAllocationFailed", kNode).empty(); }, kWait));
}

// On Stop (SIGTERM) the plugin first says in its inventory that it is stopping, so the extender stops
// choosing the node before the kubelet loses the plugin; the next plugin's first publication takes it back.
TEST_F(DaemonTest, SaysItIsStoppingBeforeItStopsAndTheNextPluginTakesItBack) {
  StartNode();
  ASSERT_TRUE(WaitUntil([&] { return Inventory().has_value(); }, kWait));
  EXPECT_FALSE(Inventory()->stopping);
  node_->daemon->Stop();
  ASSERT_TRUE(Inventory().has_value());
  EXPECT_TRUE(Inventory()->stopping) << "said before Stop returned";
  EXPECT_EQ(Inventory()->cards, TwoCards()) << "the cards stay in view";
  ASSERT_TRUE(node_->StartDaemon());
  EXPECT_TRUE(WaitUntil([&] { return Inventory() && !Inventory()->stopping; }, kWait));
}

TEST_F(DaemonTest, PluginRestartMidStreamLosesNoAllocation) {
  StartNode();
  // Same shape on different cards: "first" is older, so only the kubelet's PodResources tells the restarted
  // plugin that it is no longer pending.
  ASSERT_TRUE(api_.Create("pods", BoundPod("first", {{"main", 20, 2, kCardA}}, 1)).ok());
  ASSERT_TRUE(Admit("first", "main", 20, 2).ok());
  ASSERT_TRUE(WaitForHeld("first", OneContainer("main", kCardA, 20, 2)));
  ASSERT_TRUE(api_.Create("pods", BoundPod("second", {{"main", 20, 2, kCardB}}, 2)).ok());
  auto core = Admit("second", "main", 20, 0);
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_EQ(core->envs["MGPU_VISIBLE_CARDS"], kCardB);

  ASSERT_TRUE(node_->StartDaemon());  // a new plugin process, mid-way through "second"
  auto memory = Admit("second", "main", 0, 2);
  ASSERT_TRUE(memory.ok()) << memory.message();
  EXPECT_EQ(memory->envs["MGPU_VISIBLE_CARDS"], kCardB);
  EXPECT_TRUE(WaitForHeld("second", OneContainer("main", kCardB, 20, 2)));
  EXPECT_EQ(HeldOf("first"), OneContainer("main", kCardA, 20, 2));
  EXPECT_EQ(PatchesOf("first") + PatchesOf("second"), 0u) << "both got their assigned cards";
}

TEST_F(DaemonTest, LookAlikesSwapCardsWithoutAWarningThroughAPluginRestart) {
  StartNode();
  // Same whole shape: one pool. The kubelet admits the younger first; it gets the elder's card A, and the
  // elder, admitted after the plugin restarted, gets the younger's card B. Both records say what happened.
  ASSERT_TRUE(api_.Create("pods", BoundPod("elder", {{"main", 30, 2, kCardA}}, 1)).ok());
  ASSERT_TRUE(api_.Create("pods", BoundPod("younger", {{"main", 30, 2, kCardB}}, 2)).ok());
  auto younger = Admit("younger", "main", 30, 2);
  ASSERT_TRUE(younger.ok()) << younger.message();
  EXPECT_EQ(younger->envs["MGPU_VISIBLE_CARDS"], kCardA);
  ASSERT_TRUE(WaitForAllocated("younger", OneContainer("main", kCardA, 30, 2)));
  // A swap is said as a Normal Event (a container holding its assignment gets none).
  ASSERT_TRUE(WaitUntil([&] { return Events("GPUAllocated", "younger").size() == 1; }));
  EXPECT_EQ(Events("GPUAllocated", "younger")[0]["type"], "Normal");
  EXPECT_EQ(Events("GPUAllocated", "younger")[0]["message"],
            "allocated cards GPU-aaaa (mgpu-core 30, mgpu-memory 2048 MiB) to container main, in place of "
            "its assignment GPU-bbbb (mgpu-core 30, mgpu-memory 2048 MiB): look-alike pods may swap cards");

  ASSERT_TRUE(node_->StartDaemon());
  auto elder = Admit("elder", "main", 30, 2);
  ASSERT_TRUE(elder.ok()) << elder.message();
  EXPECT_EQ(elder->envs["MGPU_VISIBLE_CARDS"], kCardB);
  EXPECT_TRUE(WaitForAllocated("elder", OneContainer("main", kCardB, 30, 2)));
  EXPECT_TRUE(WaitUntil([&] { return Events("GPUAllocated", "elder").size() == 1; }));
  EXPECT_EQ(AllocatedOf("younger"), OneContainer("main", kCardA, 30, 2));
  EXPECT_TRUE(Events("GPUAllocationDiffers", "younger").empty());
  EXPECT_TRUE(Events("GPUAllocationDiffers", "elder").empty());
}

TEST_F(DaemonTest, AWorkloadsAnnotationsAreReadIntoThePodsShape) {
  // "elder" asks guaranteed-burst-share on itself; "younger" through its Deployment (via its ReplicaSet), as
  // the extender reads it (DESIGN §3). So they are look-alikes: the younger, admitted first, takes the
  // elder's card as a normal swap. Read without the workload, they would be an ambiguous pair and the swap a
  // GPUAllocationDiffers Warning.
  ASSERT_TRUE(
      api_.Create("deployments", {{"apiVersion", "apps/v1"},
                                  {"kind", "Deployment"},
                                  {"metadata",
                                   {{"name", "web"},
                                    {"namespace", "default"},
                                    {"annotations", {{kNames.compute_policy, "guaranteed-burst-share"}}}}}})
          .ok());
  const auto owned_by = [](const char* kind, const char* name) {
    return json::array({{{"apiVersion", "apps/v1"}, {"kind", kind}, {"name", name}, {"controller", true}}});
  };
  ASSERT_TRUE(api_.Create("replicasets", {{"apiVersion", "apps/v1"},
                                          {"kind", "ReplicaSet"},
                                          {"metadata",
                                           {{"name", "web-1"},
                                            {"namespace", "default"},
                                            {"ownerReferences", owned_by("Deployment", "web")}}}})
                  .ok());
  StartNode();
  json elder = BoundPod("elder", {{"main", 30, 2, kCardA}}, 1);
  elder["metadata"]["annotations"][kNames.compute_policy] = "guaranteed-burst-share";
  ASSERT_TRUE(api_.Create("pods", elder).ok());
  json younger = BoundPod("younger", {{"main", 30, 2, kCardB}}, 2);
  younger["metadata"]["ownerReferences"] = owned_by("ReplicaSet", "web-1");
  ASSERT_TRUE(api_.Create("pods", younger).ok());
  ASSERT_TRUE(Admit("younger", "main", 30, 2).ok());
  ASSERT_TRUE(WaitForAllocated("younger", OneContainer("main", kCardA, 30, 2)));
  ASSERT_TRUE(Admit("elder", "main", 30, 2).ok());
  ASSERT_TRUE(WaitForAllocated("elder", OneContainer("main", kCardB, 30, 2)));
  EXPECT_TRUE(Events("GPUAllocationDiffers", "younger").empty());
  EXPECT_TRUE(Events("GPUAllocationDiffers", "elder").empty());
}

TEST_F(DaemonTest, KubeletRestartRegistersAgainAndKeepsMatchingAssignments) {
  StartNode();
  ASSERT_TRUE(node_->kubelet->Restart().ok());
  ASSERT_TRUE(node_->kubelet->WaitForRegistrations(6, kWait));
  for (Resource r : kAllResources) {
    ASSERT_TRUE(node_->kubelet->WaitForLists(
        FullName(r, kNames), [](const auto& d) { return !d.empty(); }, kWait));
  }
  ASSERT_TRUE(api_.Create("pods", BoundPod("after", {{"main", 30, 1, kCardB}})).ok());
  auto a = Admit("after", "main", 30, 1);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardB);
  EXPECT_TRUE(node_->daemon->Registered());
}

TEST_F(DaemonTest, SeveralDaemonsRunInOneProcess) {
  ASSERT_TRUE(api_.Create("nodes", {{"metadata", {{"name", "node-b"}}}}).ok());
  std::vector<std::unique_ptr<Node>> nodes;
  for (const char* name : {kNode, "node-b"}) {
    nodes.push_back(std::make_unique<Node>(name, api_.url(), config_));
    ASSERT_TRUE(nodes.back()->kubelet->Start().ok());
    ASSERT_TRUE(nodes.back()->StartDaemon()) << name;
  }
  ASSERT_NE(nodes[0]->daemon->metrics_port(), nodes[1]->daemon->metrics_port());
  // A pod on each node, assigned to card B there, admitted by that node's kubelet.
  for (const auto& n : nodes) {
    const std::string pod = "on-" + n->name;
    ASSERT_TRUE(api_.Create("pods", BoundPod(pod, {{"main", 10, 1, kCardB}}, 1, n->name)).ok());
    auto a = n->kubelet->Admit("default", pod, "main", {{kNames.core, 10}, {kNames.memory, 1}}, rng_);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ(a->envs["MGPU_VISIBLE_CARDS"], kCardB);
    // Its plugin bills it once the kubelet's PodResources shows it.
    httplib::Client metrics("127.0.0.1", n->daemon->metrics_port());
    EXPECT_TRUE(WaitUntil([&] {
      auto res = metrics.Get("/metrics");
      return res && res->body.find("mgpu_pod_gpu_share{node=\"" + n->name +
                                   "\",namespace=\"default\",pod=\"" + pod) != std::string::npos;
    }));
  }
  for (const auto& n : nodes) {
    EXPECT_TRUE(WaitUntil([&] {
      const json node = api_.Get("nodes", "", n->name).value_or(json());
      return node["metadata"].value("annotations", json::object()).contains(kNames.gpu_inventory);
    }));
  }
  for (auto& n : nodes) n->daemon->Stop();
}

TEST_F(DaemonTest, StartFailsWithAClearErrorAndStopIsIdempotent) {
  config_.memory_unit_mib = 1;
  std::vector<Card> big;
  for (int i = 0; i < 8; ++i)
    big.push_back(Card{i, "GPU-big-" + std::to_string(i), "NVIDIA A100-SXM4-80GB", 81920, true});
  Daemon refused(config_, kNode, std::make_unique<node::StaticBackend>(big));
  kube::ClusterConfig cluster;
  cluster.server = api_.url();
  Status s = refused.Start(cluster);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("memoryUnitMiB"), std::string::npos) << s.message();
  refused.Stop();
  refused.Stop();

  Daemon nameless(config_, "", std::make_unique<node::StaticBackend>(TwoCards()));
  EXPECT_FALSE(nameless.Start(cluster).ok());
}

}  // namespace
}  // namespace mgpu::dp
