#include "common/scheduler.h"

#include <gtest/gtest.h>

#include "common/test_util.h"

namespace mgpu {
namespace {

using test::CostOf;
using test::Node;

PodRequest Ask(const std::string& uid, int core, int cards = 1) {
  PodRequest pod;
  pod.namespace_name = "ns";
  pod.name = "p-" + uid;
  pod.uid = uid;
  pod.containers.push_back(ContainerRequest{"main", false, core * cards, 0, 1024, cards});
  return pod;
}

// Counts the publications: the cluster's free core is read only when a model is published.
struct FreeCounter {
  int calls = 0;
  std::function<ClusterFree()> Fn() {
    return [this] {
      ++calls;
      return ClusterFree{{{"NVIDIA-A10", 100}}, {}};
    };
  }
};

TEST(ModelPublisher, PublishesTheFirstPodAtOnce) {
  ModelPublisher publisher;
  EXPECT_EQ(publisher.Current().version, 0u);
  EXPECT_TRUE(publisher.Current().model->Empty());
  FreeCounter free;
  const ModelPublisher::Published first = publisher.Observe(Ask("a", 30), free.Fn());
  EXPECT_EQ(first.version, 1u);
  EXPECT_FALSE(first.model->Empty());
  EXPECT_EQ(free.calls, 1);
  EXPECT_EQ(publisher.Current().version, 1u);
}

TEST(ModelPublisher, PublishesEverySixteenLearnedPodsAndNotBefore) {
  ModelPublisher publisher;
  FreeCounter free;
  ASSERT_EQ(publisher.Observe(Ask("first", 30), free.Fn()).version, 1u);
  for (int i = 1; i < ModelPublisher::kPublishEvery; ++i)
    EXPECT_EQ(publisher.Observe(Ask("pod" + std::to_string(i), 30), free.Fn()).version, 1u) << i;
  EXPECT_EQ(free.calls, 1);
  EXPECT_EQ(publisher.Observe(Ask("sixteenth", 30), free.Fn()).version, 2u);
  EXPECT_EQ(free.calls, 2);
}

TEST(ModelPublisher, DecisionsReadThePublishedModelWhileLearningGoesOn) {
  ModelPublisher publisher;
  FreeCounter free;
  const ModelPublisher::Published first = publisher.Observe(Ask("first", 30), free.Fn());
  for (int i = 1; i < ModelPublisher::kPublishEvery; ++i)
    EXPECT_EQ(publisher.Observe(Ask("big" + std::to_string(i), 90), free.Fn()).model, first.model);
  EXPECT_NE(publisher.Observe(Ask("last", 90), free.Fn()).model, first.model);
}

TEST(ModelPublisher, LearnsThePodOfOneUidOnce) {
  ModelPublisher publisher;
  FreeCounter free;
  ASSERT_EQ(publisher.Observe(Ask("a", 30), free.Fn()).version, 1u);
  // The scheduler retries a pod: its filters are not new pods.
  for (int i = 0; i < 2 * ModelPublisher::kPublishEvery; ++i)
    EXPECT_EQ(publisher.Observe(Ask("a", 30), free.Fn()).version, 1u);
  EXPECT_EQ(free.calls, 1);
}

// A deleted pod's uid is forgotten (the extender's churn does not keep the uids of pods long gone), and a pod
// of that uid would be learned again.
TEST(ModelPublisher, AForgottenUidIsLearnedAgain) {
  ModelPublisher publisher;
  FreeCounter free;
  ASSERT_EQ(publisher.Observe(Ask("first", 30), free.Fn()).version, 1u);
  for (int i = 1; i < ModelPublisher::kPublishEvery; ++i) {
    publisher.Observe(Ask("a", 30), free.Fn());
    publisher.Forget("a");
  }
  EXPECT_EQ(publisher.Observe(Ask("a", 30), free.Fn()).version, 2u);
}

TEST(ModelPublisher, LearnsAPodWithoutUidEveryTime) {
  ModelPublisher publisher;
  FreeCounter free;
  for (int i = 0; i <= ModelPublisher::kPublishEvery; ++i) publisher.Observe(Ask("", 30), free.Fn());
  EXPECT_EQ(publisher.Current().version, 2u);
}

TEST(ModelPublisher, PodsAskingForNoGpuAreNotTheWorkload) {
  ModelPublisher publisher;
  FreeCounter free;
  PodRequest cpu_only;
  cpu_only.uid = "cpu";
  cpu_only.cpu_milli = 4000;
  EXPECT_EQ(publisher.Observe(cpu_only, free.Fn()).version, 0u);
  EXPECT_EQ(free.calls, 0);
}

// Offline pods teach the model nothing, so it stays empty and each of them publishes again, until an online
// pod is learned (the model a fragmentation decision reads is never empty for longer than needed).
TEST(ModelPublisher, PublishesWhileThePublishedModelIsEmpty) {
  ModelPublisher publisher;
  FreeCounter free;
  PodRequest offline = Ask("off1", 0);
  offline.qos = Qos::kOffline;
  offline.containers[0].reclaimed_core = 30;
  EXPECT_EQ(publisher.Observe(offline, free.Fn()).version, 1u);
  offline.uid = "off2";
  EXPECT_EQ(publisher.Observe(offline, free.Fn()).version, 2u);
  EXPECT_EQ(publisher.Observe(Ask("on", 30), free.Fn()).version, 3u);
  EXPECT_EQ(publisher.Observe(Ask("on2", 30), free.Fn()).version, 3u);
}

TEST(Assign, AppliesTheChosenCardsOrLeavesTheNodeUnchanged) {
  NodeState node = Node("n", 1, 24576);
  const Result<Assignment> placed = Assign(node, Ask("a", 70), nullptr);
  ASSERT_TRUE(placed.ok()) << placed.message();
  EXPECT_EQ(node.cards[0].usage.core, 70);
  const NodeState before = node;
  const Result<Assignment> refused = Assign(node, Ask("b", 40), nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(node.cards[0].usage, before.cards[0].usage);
}

TEST(ClusterFreeOf, SumsTheFreeCoreOfEveryNodePerProductAndListsEachNode) {
  std::vector<NodeState> nodes = {Node("a", 2, 24576), Node("b", 1, 24576)};
  nodes[0].cpu_free_milli = 8000;
  ASSERT_TRUE(Assign(nodes[0], Ask("p", 30), nullptr).ok());
  nodes[1].cards[0].card.healthy = false;
  const ClusterFree free = ClusterFreeOf(nodes);
  ASSERT_EQ(free.core.size(), 1u);
  EXPECT_EQ(free.core.at("NVIDIA-A10"), 170);
  ASSERT_EQ(free.nodes.size(), 2u);
  EXPECT_EQ(free.nodes[0].core, (std::vector<int>{70, 100}));
  EXPECT_EQ(free.nodes[0].cpu_milli, 8000);
  EXPECT_EQ(free.nodes[0].product, "NVIDIA-A10");
  EXPECT_EQ(free.nodes[1].core, (std::vector<int>{0}));
}

// One pod's whole cycle: the best-scored node takes the pod and its cards; the others keep nothing.
TEST(ScheduleOne, AssignsTheBestNodeAndLeavesTheOthers) {
  NodeState emptier = Node("emptier", 1, 24576), fuller = Node("fuller", 1, 24576);
  PodRequest binpack = Ask("first", 40);
  binpack.card_policy = CardPolicy::kBinpack;
  binpack.node_policy = NodePolicy::kBinpack;
  ASSERT_TRUE(Assign(fuller, binpack, nullptr).ok());
  ModelPublisher publisher;
  Placement scratch;
  int picks = 0;
  PodRequest pod = binpack;
  pod.uid = "second";
  const Result<Scheduled> s = ScheduleOne(
      {&emptier, &fuller}, pod, publisher, {}, /*with_reasons=*/false,
      [&](size_t n) {
        ++picks;
        EXPECT_EQ(n, 1u);  // no tie
        return size_t{0};
      },
      scratch);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(picks, 1);
  EXPECT_EQ(s->node, 1u);  // binpack: the fuller node
  ASSERT_EQ(s->decisions.size(), 2u);
  EXPECT_TRUE(s->decisions[0].fits && s->decisions[1].fits);
  ASSERT_EQ(s->assignment.containers.size(), 1u);
  EXPECT_EQ(fuller.cards[0].usage.core, 80);
  EXPECT_EQ(emptier.cards[0].usage.core, 0);
  EXPECT_FALSE(publisher.Current().model->Empty()) << "the pod is learned";
}

TEST(ScheduleOne, TiesGoToThePickAndNothingFittingLeavesEveryNodeAsItWas) {
  // Costs differ by node name below any other difference: two alike nodes of one name tie.
  NodeState a = Node("a", 1, 24576), b = Node("a", 1, 24576);
  ModelPublisher publisher;
  Placement scratch;
  PodRequest pod = Ask("p", 60);
  pod.card_policy = CardPolicy::kBinpack;
  pod.node_policy = NodePolicy::kSpread;
  size_t offered = 0;
  const Result<Scheduled> tie = ScheduleOne(
      {&a, &b}, pod, publisher, {}, false,
      [&](size_t n) {
        offered = n;
        return n - 1;
      },
      scratch);
  ASSERT_TRUE(tie.ok());
  EXPECT_EQ(offered, 2u);
  EXPECT_EQ(tie->node, 1u);
  EXPECT_EQ(b.cards[0].usage.core, 60);

  const Result<Scheduled> none = ScheduleOne(
      {&b}, Ask("q", 60), publisher, {}, /*with_reasons=*/true,
      [](size_t) -> size_t {
        ADD_FAILURE() << "nothing fits: no pick";
        return 0;
      },
      scratch);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->node, Scheduled::kNowhere);
  ASSERT_EQ(none->decisions.size(), 1u);
  EXPECT_FALSE(none->decisions[0].reason.empty());
  EXPECT_EQ(b.cards[0].usage.core, 60);

  const Result<Scheduled> cpu_only = ScheduleOne(
      {&b}, PodRequest{}, publisher, {}, false, [](size_t) { return size_t{0}; }, scratch);
  ASSERT_TRUE(cpu_only.ok());
  EXPECT_EQ(cpu_only->node, 0u);  // a pod asking no GPU fits, and gets no cards
  EXPECT_TRUE(cpu_only->assignment.containers.empty());
}

// A pod asking for no mgpu resource: the fitting nodes without cards, all at the top, when there are any;
// else the fitting nodes ranked by cost as a GPU pod's.
TEST(CpuOnlyScores, NodesWithoutCardsFirstElseTheCheapestPlacement) {
  std::vector<NodeDecision> decisions(3);
  decisions[0].fits = true;
  decisions[0].cost = -0.2;
  decisions[1].fits = true;
  decisions[1].cost = -0.5;
  EXPECT_EQ(CpuOnlyScores(decisions, {true, true, true}), (std::vector<int>{9, 10, 0}));
  EXPECT_EQ(CpuOnlyScores(decisions, {true, true, false}), (std::vector<int>{0, 0, 10}));
  EXPECT_EQ(CpuOnlyScores(decisions, {false, true, false}), (std::vector<int>{10, 0, 10}));
}

// The candidates are the nodes kube-scheduler's filters passed (its CPU and memory fit is not Place's).
TEST(ScheduleOne, APodAskingNoGpuGoesToANodeWithoutCardsFirst) {
  NodeState gpu = Node("gpu", 1, 24576), bare = Node("bare", 0, 24576), other = Node("other", 0, 24576);
  ModelPublisher publisher;
  Placement scratch;
  size_t offered = 0;
  const auto last = [&](size_t n) {
    offered = n;
    return n - 1;
  };
  const Result<Scheduled> s = ScheduleOne({&bare, &gpu, &other}, PodRequest{}, publisher, {}, false, last, scratch);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(offered, 2u);  // the two without cards, alike
  EXPECT_EQ(s->node, 2u);
  const Result<Scheduled> gpu_only = ScheduleOne({&gpu}, PodRequest{}, publisher, {}, false, last, scratch);
  ASSERT_TRUE(gpu_only.ok());
  EXPECT_EQ(gpu_only->node, 0u);
}

}  // namespace
}  // namespace mgpu
