#include "common/decision_memo.h"

#include <gtest/gtest.h>

#include "common/allocator.h"
#include "common/clock.h"

#include "common/test_objects.h"

namespace mgpu {
namespace {

using namespace testobj;

// A pod of one container asking `core` mgpu-core and `memory_mib` on one card.
PodRequest Ask(int core, int64_t memory_mib = 1024) {
  PodRequest pod;
  pod.containers.push_back(ContainerRequest{"c", false, core, 0, memory_mib, 1});
  return pod;
}

// The memo keys a decision by the node's slot and generation, never by its content. So a copy of a node view
// with its card filled but the generation kept shows whether a decision was reused (still "fits") or made
// again (does not fit).
class DecisionMemoTest : public ::testing::Test {
 protected:
  DecisionMemoTest() {
    cache_.UpsertNode(NodeOf(Node("n", 1)));
    view_ = cache_.Snapshot();
    free_ = *view_->Find("n");
    full_ = free_;
    full_.state.cards[0].usage.core = 100;
  }

  NodeDecision DecideOn(const NodeView& node, const PodRequest& pod, uint64_t model_version = 1,
                        bool with_reasons = false) {
    return memo_.Decide(*view_, {&node}, pod, nullptr, model_version, with_reasons).at(0);
  }

  ClusterCache cache_{Config()};
  std::shared_ptr<const ClusterView> view_;
  NodeView free_, full_;
  DecisionMemo memo_;
};

TEST_F(DecisionMemoTest, DecidesFitAndCostAndLeavesAbsentNodesUnfit) {
  const std::vector<NodeDecision> d = memo_.Decide(*view_, {&free_, nullptr}, Ask(30), nullptr, 1, false);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].fits);
  EXPECT_FALSE(d[1].fits);
  EXPECT_FALSE(DecideOn(full_, Ask(40)).fits);  // a shape not decided before is decided on the content
}

TEST_F(DecisionMemoTest, ReusesTheDecisionForTheSameShapeAndGeneration) {
  ASSERT_TRUE(DecideOn(free_, Ask(30)).fits);
  EXPECT_TRUE(DecideOn(full_, Ask(30)).fits);
}

TEST_F(DecisionMemoTest, DecidesAgainOnceCleared) {
  ASSERT_TRUE(DecideOn(free_, Ask(30)).fits);
  memo_.Clear();
  EXPECT_FALSE(DecideOn(full_, Ask(30)).fits);
}

TEST_F(DecisionMemoTest, DecidesAgainWhenTheNodeViewChanges) {
  ASSERT_TRUE(DecideOn(free_, Ask(30)).fits);
  full_.generation = free_.generation + 1;
  EXPECT_FALSE(DecideOn(full_, Ask(30)).fits);
}

TEST_F(DecisionMemoTest, DecidesAgainForAnotherShape) {
  ASSERT_TRUE(DecideOn(free_, Ask(30)).fits);
  PodRequest offline = Ask(30);
  offline.qos = Qos::kOffline;
  EXPECT_FALSE(DecideOn(full_, offline).fits) << ShapeKey(offline);
  EXPECT_FALSE(DecideOn(full_, Ask(30, 2048)).fits);
  PodRequest spread = Ask(30);
  spread.card_policy = CardPolicy::kSpread;
  EXPECT_FALSE(DecideOn(full_, spread).fits);
}

TEST_F(DecisionMemoTest, PodsOfOneShapeShareDecisionsWhateverTheirNames) {
  PodRequest a = Ask(30);
  a.name = "a";
  a.uid = "uid-a";
  PodRequest b = Ask(30);
  b.name = "b";
  b.uid = "uid-b";
  EXPECT_EQ(ShapeKey(a), ShapeKey(b));
  ASSERT_TRUE(DecideOn(free_, a).fits);
  EXPECT_TRUE(DecideOn(full_, b).fits);
}

TEST_F(DecisionMemoTest, TheModelVersionMattersOnlyToPoliciesThatReadTheModel) {
  PodRequest fragmentation = Ask(30);
  fragmentation.card_policy = CardPolicy::kFragmentation;
  ASSERT_TRUE(DecideOn(free_, fragmentation, 1).fits);
  EXPECT_TRUE(DecideOn(full_, fragmentation, 1).fits);
  EXPECT_FALSE(DecideOn(full_, fragmentation, 2).fits);

  ASSERT_TRUE(DecideOn(free_, Ask(30), 1).fits);
  EXPECT_TRUE(DecideOn(full_, Ask(30), 2).fits);
}

TEST_F(DecisionMemoTest, ANodeThatDoesNotFitCarriesTheSchedulersReasonWhenAskedFor) {
  const std::string expected = "no mgpu card free for 30 percent core and 1024 MiB";
  EXPECT_EQ(DecideOn(full_, Ask(30), 1, true).reason, expected);
  EXPECT_EQ(DecideOn(full_, Ask(30), 1, true).reason, expected);  // remembered with it
}

TEST_F(DecisionMemoTest, ADecisionRememberedWithoutItsReasonIsMadeAgainForIt) {
  const NodeDecision without = DecideOn(full_, Ask(30), 1, false);
  ASSERT_FALSE(without.fits);
  EXPECT_TRUE(without.reason.empty());
  EXPECT_EQ(DecideOn(full_, Ask(30), 1, true).reason, "no mgpu card free for 30 percent core and 1024 MiB");
}

// The reason of a pod with several GPU containers names the one that does not fit.
TEST_F(DecisionMemoTest, PodsWhoseContainersAreNamedApartDoNotShareReasons) {
  PodRequest pair = Ask(30), other = Ask(30);
  pair.containers.push_back(pair.containers[0]);
  pair.containers[1].name = "d";
  other.containers = pair.containers;
  other.containers[0].name = "other";
  EXPECT_NE(ShapeKey(other), ShapeKey(pair));
  ASSERT_NE(DecideOn(full_, pair, 1, true).reason.find("container c"), std::string::npos);
  EXPECT_NE(DecideOn(full_, other, 1, true).reason.find("container other"), std::string::npos);
}

// Eight shapes are remembered, the least recently used forgotten first.
TEST_F(DecisionMemoTest, RemembersTheEightLatestShapes) {
  ASSERT_TRUE(DecideOn(free_, Ask(1)).fits);
  for (int core = 2; core <= 8; ++core) DecideOn(free_, Ask(core));
  EXPECT_TRUE(DecideOn(full_, Ask(1)).fits);  // seven others since: still remembered, and now the latest

  for (int core = 11; core <= 18; ++core) DecideOn(free_, Ask(core));
  EXPECT_FALSE(DecideOn(full_, Ask(1)).fits);  // eight others since: forgotten
}

// Node w: pod a (80 percent core, 2000 MiB) holds card 0 and still waits for the kubelet. A pod asking the
// same 2000 MiB at 50 percent core fits only card 1, so the device plugin could confuse the two: a bind
// there would wait. A look-alike of a would not (the two are one pool).
class DecisionMemoWaitTest : public ::testing::Test {
 protected:
  DecisionMemoWaitTest() {
    const ResourceNames names = Config().Names();
    cache_.UpsertNode(NodeOf(Node("w", 2, 10000)));
    cache_.UpsertPod(PodOf(
        Placed(Pod("a", 80, 2000), "w", names.gpu_assignment, OneCard("w-gpu0", 80, 2000), UnixNowNs())));
    view_ = cache_.Snapshot();
    waiting_ = *view_->Find("w");
  }

  NodeDecision DecideFor(const NodeView& node, const PodRequest& pod, const std::string& uid) {
    return memo_.Decide(*view_, {&node}, pod, nullptr, 1, false, &uid).at(0);
  }

  ClusterCache cache_{Config()};
  std::shared_ptr<const ClusterView> view_;
  NodeView waiting_;
  DecisionMemo memo_;
};

TEST_F(DecisionMemoWaitTest, AFittingNodeSaysWhetherTheBindWouldWaitOnlyWhenAsked) {
  ASSERT_EQ(waiting_.waiting.size(), 1u);
  const NodeDecision asked = DecideFor(waiting_, Ask(50, 2000), "uid-b");
  ASSERT_TRUE(asked.fits);
  EXPECT_TRUE(asked.waits);
  EXPECT_FALSE(memo_.Decide(*view_, {&waiting_}, Ask(50, 2000), nullptr, 1, false).at(0).waits);
  EXPECT_FALSE(DecideFor(waiting_, Ask(10, 2000), "uid-c").waits);  // a look-alike of a
  EXPECT_FALSE(DecideFor(waiting_, Ask(50, 3000), "uid-d").waits);  // asks a size a does not
}

// Decided once per node view and shape, like the fit: a copy of the view whose waiting pod no longer makes a
// pair, the generation kept, still answers what was remembered.
TEST_F(DecisionMemoWaitTest, WhetherABindWouldWaitIsRememberedPerNodeViewAndShape) {
  ASSERT_TRUE(DecideFor(waiting_, Ask(50, 2000), "uid-b").waits);
  NodeView unpaired = waiting_;
  unpaired.pods[unpaired.waiting[0]].request.containers[0].memory_mib = 3000;
  EXPECT_TRUE(DecideFor(unpaired, Ask(50, 2000), "uid-e").waits);
  unpaired.generation = waiting_.generation + 1;
  EXPECT_FALSE(DecideFor(unpaired, Ask(50, 2000), "uid-e").waits);
}

// A pod never waits for itself: asked for a pod that is itself the waiting one, the answer is decided for
// it alone and not remembered for the other pods of its shape (nor taken from them).
TEST_F(DecisionMemoWaitTest, APodAmongTheWaitingOnesIsDecidedForItselfAlone) {
  EXPECT_FALSE(DecideFor(waiting_, Ask(50, 2000), "uid-a").waits);
  EXPECT_TRUE(DecideFor(waiting_, Ask(50, 2000), "uid-b").waits);
  EXPECT_FALSE(DecideFor(waiting_, Ask(50, 2000), "uid-a").waits);
}

}  // namespace
}  // namespace mgpu
