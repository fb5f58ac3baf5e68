#include "common/cluster_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/allocator.h"
#include "common/json_path.h"
#include "common/request.h"
#include "common/test_objects.h"

namespace mgpu {
namespace {

using namespace testobj;
constexpr int64_t kSecond = 1'000'000'000;

class CacheTest : public ::testing::Test {
 protected:
  CacheTest() : cache_(Config(), [this] { return now_.load(); }) {}
  const CardState& CardOf(const std::string& node, int index) {
    snapshot_ = cache_.Snapshot();
    return snapshot_->Find(node)->state.cards.at(index);
  }
  PodRequest Request(const nlohmann::json& pod) {
    Result<PodRequest> r = ParsePodRequest(pod, Config());
    EXPECT_TRUE(r.ok()) << r.message();
    return *r;
  }
  std::atomic<int64_t> now_{1000 * kSecond};
  ClusterCache cache_;
  std::shared_ptr<const ClusterView> snapshot_;
  const ResourceNames names_ = Config().Names();
};

TEST_F(CacheTest, NodesWithoutInventoryAreAbsentAndBadInventoryIsAProblem) {
  cache_.UpsertNode(NodeOf({{"metadata", {{"name", "plain"}}}}));
  nlohmann::json bad = Node("bad", 1);
  bad["metadata"]["annotations"][names_.gpu_inventory] = "{not json";
  cache_.UpsertNode(NodeOf(bad));
  cache_.UpsertNode(NodeOf(Node("good", 2)));
  auto view = cache_.Snapshot();
  EXPECT_EQ(view->Find("plain"), nullptr);
  EXPECT_NE(view->Find("bad")->problem.find("unreadable"), std::string::npos);
  EXPECT_EQ(view->Find("good")->state.cards.size(), 2u);
  cache_.DeleteNode("good");
  EXPECT_EQ(cache_.Snapshot()->Find("good"), nullptr);
}

// Views share blocks of nodes: a later change, removal or addition never shows in an earlier view.
TEST_F(CacheTest, SnapshotsStayAsTheyWereAcrossManyNodes) {
  for (int i = 0; i < 200; ++i) cache_.UpsertNode(NodeOf(Node("n" + std::to_string(i), 1)));
  auto before = cache_.Snapshot();
  ASSERT_EQ(before->size(), 200u);
  cache_.UpsertPod(
      PodOf(Placed(Pod("p", 30, 100), "n150", names_.gpu_allocated, OneCard("n150-gpu0", 30, 100))));
  for (int i = 0; i < 100; ++i) cache_.DeleteNode("n" + std::to_string(i));
  for (int i = 0; i < 70; ++i) cache_.UpsertNode(NodeOf(Node("m" + std::to_string(i), 2)));
  auto after = cache_.Snapshot();
  EXPECT_EQ(after->size(), 170u);
  EXPECT_EQ(after->Find("n150")->state.cards[0].usage.core, 30);
  EXPECT_EQ(after->Find("n5"), nullptr);
  EXPECT_EQ(after->Find("m69")->state.cards.size(), 2u);
  EXPECT_EQ(before->Find("n150")->state.cards[0].usage.core, 0);
  EXPECT_EQ(before->Find("n5")->state.name, "n5");
  EXPECT_EQ(before->Find("m0"), nullptr);
  for (int i = 0; i < 200; ++i) {  // every name found after the churn, on its own node
    const std::string n = "n" + std::to_string(i), m = "m" + std::to_string(i);
    EXPECT_EQ(after->Find(n) ? after->Find(n)->state.name : "", i >= 100 ? n : "");
    EXPECT_EQ(after->Find(m) ? after->Find(m)->state.name : "", i < 70 ? m : "");
  }
  const std::vector<const NodeView*> nodes = after->Nodes();
  ASSERT_EQ(nodes.size(), 170u);
  for (size_t i = 1; i < nodes.size(); ++i) EXPECT_LT(nodes[i - 1]->state.name, nodes[i]->state.name);
}

// A node with nothing on it is served by the view built when its inventory was read: a wave of pods leaves
// behind the views from before it, not copies allocated amid the wave (whose pages they would keep resident).
TEST_F(CacheTest, AnIdleNodeGetsBackItsViewFromBeforeItsPods) {
  cache_.UpsertNode(NodeOf(Node("n", 2)));
  const std::shared_ptr<const ClusterView> empty = cache_.Snapshot();
  const NodeView* idle = empty->Find("n");
  cache_.UpsertPod(PodOf(Placed(Pod("p", 30, 100), "n", names_.gpu_allocated, OneCard("n-gpu0", 30, 100))));
  const std::shared_ptr<const ClusterView> busy = cache_.Snapshot();
  EXPECT_NE(busy->Find("n"), idle);
  EXPECT_EQ(busy->Find("n")->state.cards[0].usage.core, 30);
  cache_.UpsertNode(NodeOf(Node("n", 2)));  // the same facts again: the view stays
  EXPECT_EQ(cache_.Snapshot()->Find("n"), busy->Find("n"));
  cache_.DeletePod("default/p", "uid-p");
  const NodeView* after = cache_.Snapshot()->Find("n");
  EXPECT_EQ(after, idle);
  EXPECT_EQ(after->generation, idle->generation);
  EXPECT_EQ(after->state.cards[0].usage.core, 0);
  cache_.UpsertNode(NodeOf(Node("n", 3)));  // new facts: a new view, idle from then on
  const NodeView* grown = cache_.Snapshot()->Find("n");
  EXPECT_NE(grown->generation, idle->generation);
  EXPECT_EQ(grown->state.cards.size(), 3u);
}

TEST_F(CacheTest, AssignedPodsCountAndAllocatedWins) {
  cache_.UpsertNode(NodeOf(Node("n", 2)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("a", 30, 1000), "n", names_.gpu_assignment, OneCard("n-gpu0", 30, 1000), now_)));
  EXPECT_EQ(CardOf("n", 0).usage.core, 30);
  // The kubelet put it on the other card: the allocation is the truth.
  nlohmann::json pod =
      Placed(Pod("a", 30, 1000), "n", names_.gpu_assignment, OneCard("n-gpu0", 30, 1000), now_);
  pod["metadata"]["annotations"][names_.gpu_allocated] = EncodeAssignment(OneCard("n-gpu1", 30, 1000));
  cache_.UpsertPod(PodOf(pod));
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  EXPECT_EQ(CardOf("n", 1).usage.core, 30);
  EXPECT_EQ(CardOf("n", 1).usage.memory_mib, 1000);
}

TEST_F(CacheTest, TerminatedDeletedAndUnboundPodsRelease) {
  cache_.UpsertNode(NodeOf(Node("n", 1)));
  nlohmann::json pod = Placed(Pod("a", 30, 1000), "n", names_.gpu_allocated, OneCard("n-gpu0", 30, 1000));
  cache_.UpsertPod(PodOf(pod));
  EXPECT_EQ(CardOf("n", 0).usage.core, 30);
  pod["status"]["phase"] = "Succeeded";
  cache_.UpsertPod(PodOf(pod));
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  pod["status"]["phase"] = "Running";
  cache_.UpsertPod(PodOf(pod));
  EXPECT_EQ(CardOf("n", 0).usage.core, 30);
  cache_.DeletePod(PodKeyOf(pod), MetadataString(pod, "uid"));
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  nlohmann::json unbound =
      Placed(Pod("b", 30, 1000), "n", names_.gpu_assignment, OneCard("n-gpu0", 30, 1000), now_);
  unbound["spec"].erase("nodeName");
  cache_.UpsertPod(PodOf(unbound));
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
}

// The plugin is down for longer than the TTL: a bound pod keeps its cards, so none is handed out twice; a
// bind the watch never showed (the pod never got bound) expires.
TEST_F(CacheTest, BoundPodsKeepTheirCardsPastTheTtlAndUnseenBindsExpire) {
  cache_.UpsertNode(NodeOf(Node("n", 2, 10000)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("a", 60, 1000), "n", names_.gpu_assignment, OneCard("n-gpu0", 60, 1000), now_)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("b", 40, 1000), "n", names_.gpu_allocated, OneCard("n-gpu1", 40, 1000), now_)));
  const auto now = std::chrono::steady_clock::now();
  ASSERT_TRUE(cache_.Reserve("n", Request(Pod("c", 50, 1500)), "uid-c", now_, nullptr, now).ok());
  EXPECT_EQ(CardOf("n", 1).usage.core, 90);
  now_ += Config().extender.assignment_ttl_seconds * kSecond + 1;
  EXPECT_EQ(CardOf("n", 0).usage.core, 60);  // bound, never allocated: still held
  EXPECT_EQ(CardOf("n", 1).usage.core, 40);  // c's bind was never seen: expired
  EXPECT_FALSE(cache_.Reserve("n", Request(Pod("d", 70, 1000)), "uid-d", now_, nullptr, now).ok());
}

// Two look-alikes, one card each; the kubelet admits the younger first and the plugin gives it the elder's
// card. Counted per card, whatever order the confirmations arrive in: each card exactly once.
TEST_F(CacheTest, LookAlikeSwapCountsEveryCardOnce) {
  const auto swap = [&](bool elder_confirms_first) {
    ClusterCache cache(Config(), [this] { return now_.load(); });
    cache.UpsertNode(NodeOf(Node("n", 2, 10000)));
    nlohmann::json elder =
        Placed(Pod("elder", 60, 4000), "n", names_.gpu_assignment, OneCard("n-gpu0", 60, 4000), now_);
    nlohmann::json younger =
        Placed(Pod("younger", 60, 4000), "n", names_.gpu_assignment, OneCard("n-gpu1", 60, 4000), now_ + 1);
    cache.UpsertPod(PodOf(elder));
    cache.UpsertPod(PodOf(younger));
    const auto usage = [&] {
      auto view = cache.Snapshot();
      const NodeState& s = view->Find("n")->state;
      return std::pair{s.cards[0].usage.core, s.cards[1].usage.core};
    };
    const auto confirm = [&](nlohmann::json& pod, const std::string& card) {
      pod["metadata"]["annotations"][names_.gpu_allocated] = EncodeAssignment(OneCard(card, 60, 4000));
      cache.UpsertPod(PodOf(pod));
    };
    if (elder_confirms_first) {
      confirm(elder, "n-gpu1");  // the elder, admitted second, got what the pool had left
      EXPECT_EQ(usage(), (std::pair{60, 60}));
      confirm(younger, "n-gpu0");
    } else {
      confirm(younger, "n-gpu0");
      EXPECT_EQ(usage(), (std::pair{60, 60}));  // the waiting elder holds the younger's card
      confirm(elder, "n-gpu1");
    }
    EXPECT_EQ(usage(), (std::pair{60, 60}));
    // No room for a third 60 percent pod anywhere: nothing was counted twice or dropped.
    EXPECT_FALSE(cache
                     .Reserve("n", Request(Pod("third", 60, 1000)), "uid-third", now_, nullptr,
                              std::chrono::steady_clock::now())
                     .ok());
    // A restarted extender that lists the pods in another order sees the same.
    ClusterCache restarted(Config(), [this] { return now_.load(); });
    restarted.UpsertPod(PodOf(younger));
    restarted.UpsertNode(NodeOf(Node("n", 2, 10000)));
    restarted.UpsertPod(PodOf(elder));
    auto view = restarted.Snapshot();
    EXPECT_EQ(view->Find("n")->state.cards[0].usage.core, 60);
    EXPECT_EQ(view->Find("n")->state.cards[1].usage.core, 60);
  };
  swap(true);
  swap(false);
}

// Look-alikes never wait for each other, on whichever cards they were given.
TEST_F(CacheTest, LookAlikesNeverWaitForEachOther) {
  cache_.UpsertNode(NodeOf(Node("n", 2, 10000)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("a", 80, 2000), "n", names_.gpu_assignment, OneCard("n-gpu0", 80, 2000), now_)));
  bool waited = false;
  Result<Assignment> b = cache_.Reserve("n", Request(Pod("b", 80, 2000)), "uid-b", now_, nullptr,
                                        std::chrono::steady_clock::now() + std::chrono::seconds(30), &waited);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->containers[0].cards[0].uuid, "n-gpu1");
  EXPECT_FALSE(waited);
}

// A waiting pod of another shape asks the same memory: bind goes to its card when the pod fits there, rather
// than to the card binpack would pick, and so needs no wait.
TEST_F(CacheTest, BindSteersToTheCardThatMakesNoAmbiguousPair) {
  cache_.UpsertNode(NodeOf(Node("n", 2, 10000)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("x", 20, 2000), "n", names_.gpu_assignment, OneCard("n-gpu0", 20, 2000), now_)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("z", 60, 5000), "n", names_.gpu_allocated, OneCard("n-gpu1", 60, 5000), now_)));
  const PodRequest y = Request(Pod("y", 30, 2000));
  std::string conflict;
  auto view = cache_.Snapshot();
  Result<Assignment> unsteered = ChooseCards(view->Find("n")->state, y, nullptr);
  ASSERT_TRUE(unsteered.ok());
  ASSERT_EQ(unsteered->containers[0].cards[0].uuid, "n-gpu1");  // binpack's choice: the fuller card
  bool waited = false;
  Result<Assignment> steered = cache_.Reserve(
      "n", y, "uid-y", now_, nullptr, std::chrono::steady_clock::now() + std::chrono::seconds(30), &waited);
  ASSERT_TRUE(steered.ok()) << steered.message();
  EXPECT_EQ(steered->containers[0].cards[0].uuid, "n-gpu0");
  EXPECT_FALSE(waited);
}

TEST_F(CacheTest, ReserveTakesCapacityAtOnceAndUnreserveGivesItBack) {
  cache_.UpsertNode(NodeOf(Node("n", 1, 10000)));
  const auto deadline = std::chrono::steady_clock::now();
  Result<Assignment> a = cache_.Reserve("n", Request(Pod("a", 60, 6000)), "uid-a", now_, nullptr, deadline);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(CardOf("n", 0).usage.core, 60);
  Result<Assignment> b = cache_.Reserve("n", Request(Pod("b", 60, 1000)), "uid-b", now_, nullptr, deadline);
  EXPECT_FALSE(b.ok());
  cache_.Unreserve("default/a", "uid-a");
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  EXPECT_TRUE(cache_.Reserve("n", Request(Pod("b", 60, 1000)), "uid-b", now_, nullptr, deadline).ok());
  EXPECT_FALSE(cache_.Reserve("nowhere", Request(Pod("c", 10, 10)), "uid-c", now_, nullptr, deadline).ok());
}

// The choose verb's hold: counted at once (the next choice sees the card taken), claimed by the pod's bind
// as its reservation, dropped when the same pod is held again elsewhere or unreserved.
TEST_F(CacheTest, HoldCountsAtOnceAndItsBindClaimsIt) {
  cache_.UpsertNode(NodeOf(Node("n", 1, 10000)));
  cache_.UpsertNode(NodeOf(Node("m", 1, 10000)));
  const PodRequest a = Request(Pod("a", 60, 1000));
  Result<Assignment> held = cache_.Hold("n", a, "uid-a", nullptr);
  ASSERT_TRUE(held.ok()) << held.message();
  EXPECT_EQ(CardOf("n", 0).usage.core, 60);
  EXPECT_FALSE(cache_.Hold("n", Request(Pod("b", 60, 1000)), "uid-b", nullptr).ok()) << "the card is held";
  // Held again (kube-scheduler retried the pod) on another node: the first hold is gone.
  ASSERT_TRUE(cache_.Hold("m", a, "uid-a", nullptr).ok());
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  EXPECT_EQ(CardOf("m", 0).usage.core, 60);
  // Only the bind of that pod on that node claims it.
  EXPECT_FALSE(cache_.Claim("n", "default/a", "uid-a", now_));
  EXPECT_FALSE(cache_.Claim("m", "default/a", "uid-other", now_));
  std::optional<Assignment> claimed = cache_.Claim("m", "default/a", "uid-a", now_ + 5);
  ASSERT_TRUE(claimed);
  EXPECT_EQ(*claimed, OneCard("m-gpu0", 60, 1000));
  EXPECT_FALSE(cache_.Claim("m", "default/a", "uid-a", now_)) << "claimed once";
  EXPECT_EQ(CardOf("m", 0).usage.core, 60) << "now the bind's reservation";
  cache_.Unreserve("default/a", "uid-a");
  EXPECT_EQ(CardOf("m", 0).usage.core, 0);
}

// A hold nobody claims ends: after kHoldSeconds, when the pod is deleted, or when it shows bound by another
// scheduler; a claimed hold lasts as a bind's reservation does (assignmentTTLSeconds until the watch shows
// the pod).
TEST_F(CacheTest, AHoldNobodyClaimsEnds) {
  cache_.UpsertNode(NodeOf(Node("n", 3, 10000)));
  const nlohmann::json a = Pod("a", 60, 1000), b = Pod("b", 60, 1000), c = Pod("c", 60, 1000);
  ASSERT_TRUE(cache_.Hold("n", Request(a), "uid-a", nullptr).ok());
  ASSERT_TRUE(cache_.Hold("n", Request(b), "uid-b", nullptr).ok());
  ASSERT_TRUE(cache_.Hold("n", Request(c), "uid-c", nullptr).ok());
  ASSERT_TRUE(cache_.Claim("n", "default/c", "uid-c", now_));
  cache_.DeletePod("default/a", "uid-a");
  nlohmann::json elsewhere = b;
  elsewhere["spec"]["nodeName"] = "other";
  cache_.UpsertPod(PodOf(elsewhere));
  EXPECT_EQ(CardOf("n", 0).usage.core + CardOf("n", 1).usage.core + CardOf("n", 2).usage.core, 60)
      << "only c's claimed hold counts";
  ASSERT_TRUE(cache_.Hold("n", Request(a), "uid-a", nullptr).ok());
  now_ += ClusterCache::kHoldSeconds * kSecond;
  EXPECT_EQ(CardOf("n", 0).usage.core + CardOf("n", 1).usage.core + CardOf("n", 2).usage.core, 60)
      << "a's hold ran out, c's reservation did not";
  EXPECT_FALSE(cache_.Claim("n", "default/a", "uid-a", now_)) << "nothing left to claim";
}

// A node whose plugin says it is stopping keeps its cards and pods in view but takes no new pod, with one
// sentence, until the plugin publishes again (issue 28's stop window).
TEST_F(CacheTest, StoppingPluginsNodeTakesNoNewPodUntilItIsBack) {
  cache_.UpsertNode(NodeOf(Node("n", 1, 10000)));
  cache_.UpsertPod(PodOf(Placed(Pod("p", 30, 1000), "n", names_.gpu_allocated, OneCard("n-gpu0", 30, 1000))));
  nlohmann::json stopping = Node("n", 1, 10000);
  Result<NodeInventory> inventory =
      DecodeInventory(stopping["metadata"]["annotations"][names_.gpu_inventory].get<std::string>());
  ASSERT_TRUE(inventory.ok()) << inventory.message();
  inventory->stopping = true;
  stopping["metadata"]["annotations"][names_.gpu_inventory] = EncodeInventory(*inventory);
  cache_.UpsertNode(NodeOf(stopping));
  EXPECT_EQ(CardOf("n", 0).usage.core, 30) << "its pods still count";
  EXPECT_EQ(snapshot_->Find("n")->problem,
            "node n's mgpu-device-plugin is stopping; its cards take no new pods until it is back");
  const auto deadline = std::chrono::steady_clock::now();
  Result<Assignment> refused =
      cache_.Reserve("n", Request(Pod("a", 10, 100)), "uid-a", now_, nullptr, deadline);
  EXPECT_EQ(refused.message(), snapshot_->Find("n")->problem);
  cache_.UpsertNode(NodeOf(Node("n", 1, 10000)));
  EXPECT_TRUE(cache_.Reserve("n", Request(Pod("a", 10, 100)), "uid-a", now_, nullptr, deadline).ok());
}

TEST_F(CacheTest, AssumedBindSurvivesAStaleWatchEventAndYieldsToTheBoundPod) {
  cache_.UpsertNode(NodeOf(Node("n", 1)));
  const nlohmann::json pending = Pod("a", 50, 1000);
  Result<Assignment> a =
      cache_.Reserve("n", Request(pending), "uid-a", now_, nullptr, std::chrono::steady_clock::now());
  ASSERT_TRUE(a.ok());
  cache_.UpsertPod(PodOf(pending));  // the watch still shows the pod as it was before the bind
  EXPECT_EQ(CardOf("n", 0).usage.core, 50);
  cache_.UpsertPod(PodOf(Placed(pending, "n", names_.gpu_assignment, *a, now_)));
  EXPECT_EQ(CardOf("n", 0).usage.core, 50);
  EXPECT_EQ(snapshot_->Find("n")->pods.size(), 1u);
}

TEST_F(CacheTest, NodesFreeCpuAndMemoryCountEveryBoundPodAndAssumedBinds) {
  nlohmann::json node = Node("n", 1);
  cache_.UpsertNode(NodeOf(node));
  const auto free_of = [&] {
    snapshot_ = cache_.Snapshot();
    const NodeState& s = snapshot_->Find("n")->state;
    return std::pair{s.cpu_free_milli, s.host_memory_free_mib};
  };
  EXPECT_EQ(free_of(), (std::pair<int64_t, int64_t>{-1, -1}));  // no allocatable: unknown
  node["status"]["allocatable"] = {{"cpu", "16"}, {"memory", "64Gi"}};
  cache_.UpsertNode(NodeOf(node));
  EXPECT_EQ(free_of(), (std::pair<int64_t, int64_t>{16000, 65536}));
  // A pod without GPU counts once bound, and stops when it finishes.
  nlohmann::json web = Pod("web", 10, 10);
  web["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "1500m"}, {"memory", "2Gi"}}}};
  cache_.UpsertPod(PodOf(web));
  EXPECT_EQ(free_of().first, 16000);
  web["spec"]["nodeName"] = "n";
  web["status"]["phase"] = "Running";
  cache_.UpsertPod(PodOf(web));
  EXPECT_EQ(free_of(), (std::pair<int64_t, int64_t>{14500, 63488}));
  // A bind made here counts at once, and once only when the watch shows it bound.
  nlohmann::json gpu = Pod("gpu", 50, 1000);
  gpu["spec"]["containers"][0]["resources"]["requests"] = {{"cpu", "4"}};
  Result<Assignment> a =
      cache_.Reserve("n", Request(gpu), "uid-gpu", now_, nullptr, std::chrono::steady_clock::now());
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(free_of().first, 10500);
  cache_.UpsertPod(PodOf(Placed(gpu, "n", names_.gpu_assignment, *a, now_)));
  EXPECT_EQ(free_of().first, 10500);
  web["status"]["phase"] = "Succeeded";
  cache_.UpsertPod(PodOf(web));
  EXPECT_EQ(free_of().first, 12000);
  cache_.DeletePod(PodKeyOf(gpu), MetadataString(gpu, "uid"));
  EXPECT_EQ(free_of(), (std::pair<int64_t, int64_t>{16000, 65536}));
}

TEST_F(CacheTest, FreeCoreIsSummedPerGpuProduct) {
  cache_.UpsertNode(NodeOf(Node("a", 2, 16384, "Tesla T4")));
  cache_.UpsertNode(NodeOf(Node("b", 1, 16384, "Tesla T4")));
  cache_.UpsertNode(NodeOf(Node("c", 1, 16384, "G2")));
  cache_.UpsertPod(PodOf(Placed(Pod("p", 30, 1000), "a", names_.gpu_allocated, OneCard("a-gpu0", 30, 1000))));
  using Free = std::map<std::string, double, std::less<>>;
  const auto view = cache_.Snapshot();
  const ClusterFree free = view->Free();
  EXPECT_EQ(free.core, (Free{{"Tesla-T4", 270}, {"G2", 100}}));
  ASSERT_EQ(free.nodes.size(), 3u);  // what each node has left, for the multi-card shapes' hosts
  std::vector<std::vector<int>> cards;
  for (const NodeFree& node : free.nodes) cards.push_back(node.core);
  std::sort(cards.begin(), cards.end());
  EXPECT_EQ(cards, (std::vector<std::vector<int>>{{70, 100}, {100}, {100}}));
  cache_.DeleteNode("c");
  EXPECT_EQ(cache_.Snapshot()->Free().core, (Free{{"Tesla-T4", 270}}));
}

TEST_F(CacheTest, AmbiguityGuardWaitsForTheEarlierPodToBeAllocated) {
  cache_.UpsertNode(NodeOf(Node("n", 2, 10000)));
  // a holds card 0 unallocated; b asks the same memory but must go to card 1 (card 0 lacks core).
  const nlohmann::json a =
      Placed(Pod("a", 80, 2000), "n", names_.gpu_assignment, OneCard("n-gpu0", 80, 2000), now_);
  cache_.UpsertPod(PodOf(a));
  const PodRequest b = Request(Pod("b", 50, 2000));
  Result<Assignment> refused =
      cache_.Reserve("n", b, "uid-b", now_, nullptr, std::chrono::steady_clock::now());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("default/a"), std::string::npos) << refused.message();
  // Identical shapes on identical cards do not block each other.
  EXPECT_TRUE(
      cache_
          .Reserve("n", Request(Pod("c", 10, 2000)), "uid-c", now_, nullptr, std::chrono::steady_clock::now())
          .ok());
  cache_.Unreserve("default/c", "uid-c");
  // The wait ends when the plugin reports a's allocation.
  std::thread plugin([&] {
    nlohmann::json allocated = a;
    allocated["metadata"]["annotations"][names_.gpu_allocated] =
        EncodeAssignment(OneCard("n-gpu0", 80, 2000));
    cache_.UpsertPod(PodOf(allocated));
  });
  Result<Assignment> waited = cache_.Reserve("n", b, "uid-b", now_, nullptr,
                                             std::chrono::steady_clock::now() + std::chrono::seconds(30));
  plugin.join();
  ASSERT_TRUE(waited.ok()) << waited.message();
  EXPECT_EQ(waited->containers[0].cards[0].uuid, "n-gpu1");
}

// The plugin writes no gpu-allocated for a pod the kubelet gave exactly its assignment: once the kubelet
// reports on the pod (its first status carries hostIP; it writes none before admitting the pod), the pod is
// allocated by its assignment, waits no more and blocks no bind; its cards stay counted.
TEST_F(CacheTest, APodTheKubeletReportsOnIsAllocatedByItsAssignment) {
  cache_.UpsertNode(NodeOf(Node("n", 2, 10000)));
  nlohmann::json a =
      Placed(Pod("a", 80, 2000), "n", names_.gpu_assignment, OneCard("n-gpu0", 80, 2000), now_);
  cache_.UpsertPod(PodOf(a));
  snapshot_ = cache_.Snapshot();
  EXPECT_EQ(snapshot_->Find("n")->waiting.size(), 1u);
  const PodRequest b = Request(Pod("b", 50, 2000));
  EXPECT_FALSE(cache_.Reserve("n", b, "uid-b", now_, nullptr, std::chrono::steady_clock::now()).ok());

  a["status"] = {{"phase", "Pending"}, {"hostIP", "10.0.0.7"}};
  cache_.UpsertPod(PodOf(a));
  snapshot_ = cache_.Snapshot();
  const NodeView& n = *snapshot_->Find("n");
  EXPECT_TRUE(n.waiting.empty());
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_TRUE(n.pods[0].allocated);
  EXPECT_EQ(CardOf("n", 0).usage.core, 80);
  Result<Assignment> bound = cache_.Reserve("n", b, "uid-b", now_, nullptr, std::chrono::steady_clock::now());
  ASSERT_TRUE(bound.ok()) << bound.message();
  EXPECT_EQ(bound->containers[0].cards[0].uuid, "n-gpu1");
}

// Look-alikes admitted without gpu-allocated hold from their pool, not their own assignment: a younger one
// took an elder's card (its write has come), the elder got what was left (its write is still on its way).
// Counting the elder by its assignment would put 120 on card 0 and leave card 1 looking free.
TEST_F(CacheTest, AdmittedLookAlikesWithoutGpuAllocatedHoldFromTheirPool) {
  cache_.UpsertNode(NodeOf(Node("n", 2)));
  const auto placed = [&](const char* name, const char* card, int64_t assume_s) {
    nlohmann::json pod =
        Placed(Pod(name, 40, 1000), "n", names_.gpu_assignment, OneCard(card, 40, 1000), assume_s * kSecond);
    pod["status"] = {{"phase", "Running"}, {"hostIP", "10.0.0.7"}};
    return pod;
  };
  nlohmann::json younger = placed("c", "n-gpu1", 3);
  younger["metadata"]["annotations"][names_.gpu_allocated] = EncodeAssignment(OneCard("n-gpu0", 40, 1000));
  cache_.UpsertPod(PodOf(placed("a", "n-gpu0", 1)));
  cache_.UpsertPod(PodOf(placed("b", "n-gpu0", 2)));
  cache_.UpsertPod(PodOf(younger));
  EXPECT_EQ(CardOf("n", 0).usage.core, 80);
  EXPECT_EQ(CardOf("n", 1).usage.core, 40);
  EXPECT_TRUE(snapshot_->Find("n")->waiting.empty());
}

// A bound pod whose request no longer parses (an annotation edited to a bad value after its bind) still
// holds its cards: they stay counted, waiting or allocated, and a look-alike of its old shape never takes
// them. (Dropping it would let the extender hand the same cards out again.)
TEST_F(CacheTest, APodWhoseRequestNoLongerParsesKeepsItsCards) {
  cache_.UpsertNode(NodeOf(Node("n", 3, 10000)));
  nlohmann::json broken =
      Placed(Pod("broken", 30, 1000), "n", names_.gpu_assignment, OneCard("n-gpu0", 30, 1000), now_);
  broken["metadata"]["annotations"][std::string(kQosLevelAnnotation)] = "bogus";
  ASSERT_FALSE(PodOf(broken).request.ok());
  cache_.UpsertPod(PodOf(broken));
  cache_.UpsertPod(PodOf(
      Placed(Pod("alike", 30, 1000), "n", names_.gpu_assignment, OneCard("n-gpu1", 30, 1000), now_ + 1)));
  EXPECT_EQ(CardOf("n", 0).usage.core, 30);
  EXPECT_EQ(CardOf("n", 0).usage.memory_mib, 1000);
  EXPECT_EQ(CardOf("n", 1).usage.core, 30);
  broken["metadata"]["annotations"][names_.gpu_allocated] = EncodeAssignment(OneCard("n-gpu2", 30, 1000));
  cache_.UpsertPod(PodOf(broken));
  EXPECT_EQ(CardOf("n", 0).usage.core, 0);
  EXPECT_EQ(CardOf("n", 2).usage.core, 30);  // the kubelet put it there
  EXPECT_EQ(CardOf("n", 1).usage.core, 30);
}

}  // namespace
}  // namespace mgpu
