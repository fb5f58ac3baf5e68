// The plugin's pod tracker against the fake API server (the pods bound to the node, Events, the writes of
// D/gpu-allocated) and the fake kubelet's PodResources (what the kubelet really handed out), both over real
// sockets. The tests play the kubelet's calls (Candidates, Allocated, Refused) and the poller's answers
// (Reconcile) themselves.
#include "deviceplugin/pod_tracker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/codec.h"
#include "support/assigned_pod.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_kubelet.h"
#include "testing/test_env.h"

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::WaitUntil;

constexpr auto kWait = 30s;
constexpr char kNode[] = "node-a";
const ResourceNames kNames = Config().Names();

// What container "main" of a pod of these tests holds or was assigned: `core` mgpu-core and 1 GiB of `card`.
Assignment Main(const std::string& card, int core) {
  return Assignment{{ContainerAssignment{"main", {CardShare{card, core, 0, 1024}}}}};
}

// A pod bound to kNode whose one container "main" asks `core` mgpu-core and 1 GiB and was assigned `card`.
json BoundPod(const std::string& name, const std::string& card, int core, int64_t assume_ns = 1) {
  return testing::AssignedPod(name, kNode, Main(card, core), 1024, assume_ns);
}

// What the kubelet's PodResources shows for a pod whose "main" holds Main(card, core).
AllocatedPods Holding(const std::string& pod, const std::string& card, int core) {
  return {{"default/" + pod, Main(card, core)}};
}

class PodTrackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    ASSERT_TRUE(api_.Create("nodes", {{"metadata", {{"name", kNode}}}}).ok());
    std::filesystem::create_directory(dir_.path() + "/dp");
    config_.memory_unit_mib = 1024;
    config_.device_plugin.pod_resources_socket = dir_.path() + "/pod-resources.sock";
    config_.device_plugin.pod_resources_poll_ms = 20;
    config_.device_plugin.pending_pod_wait_ms = 0;  // no re-list unless a test asks for one
    kubelet_ =
        std::make_unique<test::FakeKubelet>(dir_.path() + "/dp", config_.device_plugin.pod_resources_socket);
    ASSERT_TRUE(kubelet_->Start().ok());
    kube::ClusterConfig cluster;
    cluster.server = api_.url();
    auto client = kube::Client::Create(cluster);
    ASSERT_TRUE(client.ok()) << client.message();
    client_ = std::move(*client);
  }

  void TearDown() override {
    tracker_.reset();
    hand_off_.reset();
    poller_.reset();
  }

  // Starts the poller and the tracker, and waits for the kubelet's first answer and the pod list.
  void StartTracker() {
    poller_ = std::make_unique<PodResourcesPoller>(config_);
    poller_->Start();
    ASSERT_TRUE(poller_->WaitForAnswer(kWait));
    hand_off_ = std::make_unique<HandOff>([this] { return poller_->RequestsStarted(); });
    tracker_ = std::make_unique<PodTracker>(config_, kNode, *client_, *poller_, *hand_off_);
    tracker_->Start();
    ASSERT_TRUE(WaitUntil([&] { return tracker_->Synced(); }, kWait));
  }

  std::string Create(const json& pod) {
    auto created = api_.Create("pods", pod);
    EXPECT_TRUE(created.ok()) << created.message();
    return created.ok() ? (*created)["metadata"].value("uid", "") : "";
  }

  // What the resource servers do when the kubelet's Allocate takes the IDs preferred for `container`.
  void HandOut(Resource resource, const PendingContainer& container) {
    const std::vector<std::string> ids = {container.cards.front().uuid + "-c0"};
    hand_off_->Matched(resource, ids, container);
    hand_off_->Allocated(resource, ids, {container.cards.front().uuid}, HandOff::Clock::now());
  }

  // The pods offered for `size` devices of `resource`, as "namespace/name".
  std::vector<std::string> Offered(Resource resource, int64_t size) {
    std::vector<std::string> out;
    for (const PendingContainer& c : tracker_->Candidates(resource, size)) out.push_back(c.pod);
    return out;
  }

  // Waits until the informer shows `pod` (offered for its assigned `core`).
  bool WaitForPod(const std::string& pod, int core) {
    return WaitUntil(
        [&] {
          const std::vector<std::string> offered = Offered(Resource::kCore, core);
          return std::find(offered.begin(), offered.end(), "default/" + pod) != offered.end();
        },
        kWait);
  }

  // Waits for a PodResources answer to a request started after this call.
  bool WaitForFreshAnswer() {
    const uint64_t started = poller_->RequestsStarted();
    return WaitUntil(
        [&] {
          uint64_t answered = 0;
          poller_->Latest(&answered);
          return answered > started;
        },
        kWait);
  }

  // Lets the kubelet hold Main(card, core) for default/<pod>'s "main".
  void KubeletHolds(const std::string& pod, const std::string& card, int core) {
    std::vector<std::string> ids;
    for (int i = 0; i < core; ++i) ids.push_back(DeviceId(card, Resource::kCore, i));
    kubelet_->Hold("default", pod, "main", kNames.core, ids);
    kubelet_->Hold("default", pod, "main", kNames.memory, {DeviceId(card, Resource::kMemory, 0)});
  }

  // Every pod watch from now on waits (until the server stops).
  void HoldBackPodWatches() {
    api_.InjectFault({.action = testing::Fault::Action::kDelay,
                      .path_prefix = "/api/v1/pods",
                      .watch = true,
                      .delay = 10min,
                      .times = -1});
  }

  // Requests other than watches, from `from` on.
  std::vector<testing::RecordedRequest> RequestsSince(size_t from) {
    std::vector<testing::RecordedRequest> all = api_.requests(), out;
    for (size_t i = from; i < all.size(); ++i)
      if (!all[i].watch) out.push_back(all[i]);
    return out;
  }
  size_t Relists(size_t from) {
    size_t n = 0;
    for (const auto& r : RequestsSince(from)) n += r.method == "GET" && r.path == "/api/v1/pods";
    return n;
  }
  size_t PatchesOf(const std::string& pod) {
    size_t n = 0;
    for (const auto& r : RequestsSince(0))
      n += r.method == "PATCH" && r.path == "/api/v1/namespaces/default/pods/" + pod;
    return n;
  }

  std::vector<json> Events(const std::string& reason) {
    std::vector<json> out;
    for (const json& e : api_.List("events")) {
      if (e["reason"] == reason) out.push_back(e);
    }
    return out;
  }

  std::optional<Assignment> AllocatedOf(const std::string& pod) {
    const json p = api_.Get("pods", "default", pod).value_or(json::object());
    const json annotations = p.value("metadata", json::object()).value("annotations", json::object());
    if (!annotations.contains(kNames.gpu_allocated)) return std::nullopt;
    Result<Assignment> a = DecodeAssignment(annotations[kNames.gpu_allocated].get<std::string>());
    return a.ok() ? std::optional<Assignment>(*a) : std::nullopt;
  }

  testing::FakeApiServer api_;
  testing::TempDir dir_;
  Config config_;
  std::unique_ptr<test::FakeKubelet> kubelet_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<PodResourcesPoller> poller_;
  std::unique_ptr<HandOff> hand_off_;
  std::unique_ptr<PodTracker> tracker_;
};

TEST_F(PodTrackerTest, OffersTheContainerThatWaitsForThatManyDevices) {
  StartTracker();
  const std::string uid = Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  const std::vector<PendingContainer> offered = tracker_->Candidates(Resource::kCore, 30);
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_EQ(offered[0].pod, "default/p");
  EXPECT_EQ(offered[0].container, "main");
  EXPECT_EQ(offered[0].pod_uid, uid);
  EXPECT_EQ(offered[0].assume_time_ns, 1);
  EXPECT_EQ(offered[0].pool_size, 1);
  ASSERT_EQ(offered[0].cards.size(), 1u);
  EXPECT_EQ(offered[0].cards[0].uuid, "GPU-a");

  // Every waiting container is a candidate: the size only says whether to look for more pods.
  EXPECT_EQ(Offered(Resource::kCore, 20), std::vector<std::string>{"default/p"});
  EXPECT_EQ(Offered(Resource::kMemory, 1), std::vector<std::string>{"default/p"});
  EXPECT_TRUE(Offered(Resource::kReclaimedCore, 30).empty());
}

TEST_F(PodTrackerTest, AContainerTheKubeletHoldsIsNoLongerOffered) {
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  KubeletHolds("p", "GPU-a", 30);
  ASSERT_TRUE(WaitForFreshAnswer());
  EXPECT_TRUE(Offered(Resource::kCore, 30).empty());
}

// A hand-out counts until a PodResources answer to a request started a poll after it: neither the kubelet's
// slow answer nor one requested before the kubelet recorded the allocation can undo it.
TEST_F(PodTrackerTest, AHandOutCountsUntilAnAnswerRequestedAfterIt) {
  config_.device_plugin.pod_resources_poll_ms = 1000;  // no request starts unseen between the steps below
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  const std::vector<PendingContainer> offered = tracker_->Candidates(Resource::kCore, 30);
  ASSERT_EQ(offered.size(), 1u);

  kubelet_->PausePodResources(true);
  const size_t lists = kubelet_->PodResourcesLists();
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->PodResourcesLists() > lists; }, kWait));  // one in flight
  const uint64_t in_flight = poller_->RequestsStarted();
  HandOut(Resource::kCore, offered[0]);
  EXPECT_TRUE(Offered(Resource::kCore, 30).empty());

  // The answer to the request already in flight does not show the hand-out, and does not undo it.
  kubelet_->PausePodResources(false);
  uint64_t answered = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        poller_->Latest(&answered);
        return answered >= in_flight;
      },
      kWait));
  ASSERT_EQ(answered, in_flight);
  EXPECT_TRUE(Offered(Resource::kCore, 30).empty());

  // The first request started after the hand-out may have raced the kubelet's recording: it does not undo it.
  ASSERT_TRUE(WaitUntil(
      [&] {
        poller_->Latest(&answered);
        return answered >= in_flight + 1;
      },
      kWait));
  ASSERT_EQ(answered, in_flight + 1);
  EXPECT_TRUE(Offered(Resource::kCore, 30).empty());
  // The kubelet did not take it after all (a later answer does not show it): offered again.
  ASSERT_TRUE(WaitForFreshAnswer());
  EXPECT_EQ(Offered(Resource::kCore, 30), std::vector<std::string>{"default/p"});
}

// Two pods of one shape are one pool: when the kubelet gives the younger one the older one's preference, the
// older one is offered the cards left in the pool.
TEST_F(PodTrackerTest, LookAlikesShareTheirPoolsCards) {
  StartTracker();
  Create(BoundPod("older", "GPU-a", 30, 1));
  Create(BoundPod("younger", "GPU-b", 30, 2));
  ASSERT_TRUE(WaitForPod("older", 30) && WaitForPod("younger", 30));
  std::vector<PendingContainer> offered = tracker_->Candidates(Resource::kCore, 30);
  ASSERT_EQ(offered.size(), 2u);
  for (const PendingContainer& c : offered) EXPECT_EQ(c.pool_size, 2) << c.pod;

  KubeletHolds("younger", "GPU-a", 30);
  ASSERT_TRUE(WaitForFreshAnswer());
  offered = tracker_->Candidates(Resource::kCore, 30);
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_EQ(offered[0].pod, "default/older");
  ASSERT_EQ(offered[0].cards.size(), 1u);
  EXPECT_EQ(offered[0].cards[0].uuid, "GPU-b");
  EXPECT_EQ(offered[0].cards[0].core, 30);
}

TEST_F(PodTrackerTest, RefusalsBecomeWarningsOnThePodOrTheNode) {
  StartTracker();
  const std::string uid = Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  PendingContainer known{"default/p", "main", {}, 1, uid};
  PendingContainer unknown{"default/gone", "main", {}, 1, "uid-gone"};
  const size_t before = api_.requests().size();
  tracker_->Refused(Resource::kCore, &known, "no card fits");
  tracker_->Refused(Resource::kCore, &unknown, "no card fits");
  tracker_->Refused(Resource::kCore, nullptr, "the kubelet asked for too many");
  ASSERT_TRUE(WaitUntil([&] { return Events("GPUAllocationFailed").size() == 3; }, kWait));

  std::map<std::string, json> by_name;
  for (const json& e : Events("GPUAllocationFailed")) {
    EXPECT_EQ(e["type"], "Warning");
    by_name[e["involvedObject"]["name"]] = e;
  }
  EXPECT_EQ(by_name["p"]["involvedObject"]["uid"], uid);
  EXPECT_EQ(by_name["p"]["message"], "container main: no card fits");
  EXPECT_EQ(by_name["gone"]["involvedObject"]["uid"], "uid-gone");
  EXPECT_EQ(by_name[kNode]["involvedObject"]["kind"], "Node");
  EXPECT_EQ(by_name[kNode]["message"], "the kubelet asked for too many");
  // Nothing was read for them: the three Events are all the requests.
  for (const auto& r : RequestsSince(before))
    EXPECT_EQ(r.method + " " + r.path, "POST /api/v1/namespaces/default/events");
}

// Refused runs under the kubelet's call: it queues the Event and returns while the API server has not
// taken it. (Were it to post the Event itself, it would return after the delay, with the Event stored.)
TEST_F(PodTrackerTest, ARefusalDoesNotWaitForTheApiServer) {
  StartTracker();
  api_.InjectFault({.action = testing::Fault::Action::kDelay,
                    .method = "POST",
                    .path_prefix = "/api/v1/namespaces/default/events",
                    .delay = 10s,
                    .times = -1});
  tracker_->Refused(Resource::kCore, nullptr, "no card fits");
  EXPECT_TRUE(Events("GPUAllocationFailed").empty());
  api_.Stop();  // ends the delayed request, so that the tracker can stop
}

// The kubelet gave the pod other cards than assigned: gpu-allocated is written, and once only, though the
// watch shows the write late.
TEST_F(PodTrackerTest, ReconcileWritesTheAllocationOnce) {
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  const AllocatedPods truth = Holding("p", "GPU-b", 30);
  // The tracker's watch starts again and is held back a while: it does not show the write at once.
  api_.InjectFault(
      {.action = testing::Fault::Action::kDelay, .path_prefix = "/api/v1/pods", .watch = true, .delay = 3s});
  const size_t before = api_.requests().size();
  api_.DropWatches();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::vector<testing::RecordedRequest> all = api_.requests();
        return std::any_of(all.begin() + before, all.end(), [](const auto& r) { return r.watch; });
      },
      kWait));

  tracker_->Reconcile(truth);
  EXPECT_EQ(AllocatedOf("p"), truth.at("default/p"));
  EXPECT_EQ(PatchesOf("p"), 1u);
  tracker_->Reconcile(truth);  // the watch has not shown the write
  EXPECT_EQ(PatchesOf("p"), 1u);

  // Once a later pod is in sight, so is the write (the watch keeps order).
  Create(BoundPod("marker", "GPU-b", 7));
  ASSERT_TRUE(WaitForPod("marker", 7));
  tracker_->Reconcile(truth);
  EXPECT_EQ(PatchesOf("p"), 1u);
}

// The kubelet gave the pod exactly its assignment: no write and no Event (the extender counts an admitted
// pod's assignment as allocated, and its GPUAssigned Event named the cards).
TEST_F(PodTrackerTest, ReconcileWritesNothingForAPodGivenItsAssignment) {
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  tracker_->Reconcile(Holding("p", "GPU-a", 30));
  EXPECT_EQ(PatchesOf("p"), 0u);
  EXPECT_FALSE(AllocatedOf("p"));
  // A marker given other cards gets a Warning; the Events are created in order, so once it is there any
  // Event for p would be.
  Create(BoundPod("marker", "GPU-b", 7));
  ASSERT_TRUE(WaitForPod("marker", 7));
  AllocatedPods both = Holding("p", "GPU-a", 30);
  both.merge(Holding("marker", "GPU-a", 7));
  tracker_->Reconcile(both);
  ASSERT_TRUE(WaitUntil([&] { return Events("GPUAllocationDiffers").size() == 1; }, kWait));
  EXPECT_EQ(Events("GPUAllocationDiffers")[0]["involvedObject"]["name"], "marker");
  EXPECT_TRUE(Events("GPUAllocated").empty());
  EXPECT_EQ(PatchesOf("p"), 0u);
  EXPECT_EQ(PatchesOf("marker"), 1u);
}

TEST_F(PodTrackerTest, ReconcileLeavesPodsTheKubeletHasNotServedFully) {
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  const Assignment core_only{{ContainerAssignment{"main", {CardShare{"GPU-a", 30, 0, 0}}}}};
  tracker_->Reconcile({{"default/p", core_only}});       // no memory yet
  tracker_->Reconcile(Holding("unknown", "GPU-a", 30));  // not bound here
  EXPECT_EQ(PatchesOf("p"), 0u);
  EXPECT_EQ(PatchesOf("unknown"), 0u);
  EXPECT_FALSE(AllocatedOf("p"));
}

TEST_F(PodTrackerTest, ReconcileWarnsWhenTheKubeletGaveOtherCardsThanAssigned) {
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  ASSERT_TRUE(WaitForPod("p", 30));
  tracker_->Reconcile(Holding("p", "GPU-b", 30));
  EXPECT_EQ(AllocatedOf("p"), Holding("p", "GPU-b", 30).at("default/p"));
  ASSERT_TRUE(WaitUntil([&] { return Events("GPUAllocationDiffers").size() == 1; }, kWait));
}

// The kubelet may see a binding before this watch does: the tracker re-lists the node's pods. Here the watch
// never delivers anything.
TEST_F(PodTrackerTest, ReListsForAPodTheWatchHasNotShown) {
  config_.device_plugin.pending_pod_wait_ms = 60000;
  HoldBackPodWatches();
  StartTracker();
  Create(BoundPod("p", "GPU-a", 30));
  const size_t before = api_.requests().size();
  EXPECT_EQ(Offered(Resource::kCore, 30), std::vector<std::string>{"default/p"});
  EXPECT_GE(Relists(before), 1u);
  api_.Stop();
}

// Nobody asks that many: the re-lists end with the wait, at most one per 100 ms of it and one more.
TEST_F(PodTrackerTest, TheReListsAreBounded) {
  config_.device_plugin.pending_pod_wait_ms = 300;
  StartTracker();
  const size_t before = api_.requests().size();
  EXPECT_TRUE(Offered(Resource::kCore, 20).empty());
  EXPECT_GE(Relists(before), 1u);
  EXPECT_LE(Relists(before), 4u);
}

TEST_F(PodTrackerTest, WithoutAWaitThereIsNoReList) {
  StartTracker();
  const size_t before = api_.requests().size();
  EXPECT_TRUE(Offered(Resource::kCore, 20).empty());
  EXPECT_EQ(Relists(before), 0u);
}

TEST_F(PodTrackerTest, StopEndsAWaitForAPod) {
  config_.device_plugin.pending_pod_wait_ms = 600000;
  StartTracker();
  const size_t before = api_.requests().size();
  std::atomic<bool> returned = false;
  std::thread kubelet_call([&] {
    tracker_->Candidates(Resource::kCore, 20);
    returned = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return Relists(before) >= 1; }, kWait));
  tracker_->Stop();
  EXPECT_TRUE(WaitUntil([&] { return returned.load(); }, kWait));
  kubelet_call.join();
}

}  // namespace
}  // namespace mgpu::dp
