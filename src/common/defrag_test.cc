#include "common/defrag.h"

#include <gtest/gtest.h>

#include "common/allocator.h"
#include "common/test_util.h"

namespace mgpu {
namespace {

using test::Node;

PodRequest Online(const std::string& name, int core, int64_t memory_mib, int cards = 1) {
  PodRequest pod;
  pod.namespace_name = "ns";
  pod.name = name;
  pod.containers.push_back(ContainerRequest{"main", false, core * cards, 0, memory_mib * cards, cards});
  return pod;
}

PodRequest Offline(const std::string& name, int reclaimed_core, int64_t memory_mib) {
  PodRequest pod;
  pod.namespace_name = "ns";
  pod.name = name;
  pod.qos = Qos::kOffline;
  pod.containers.push_back(ContainerRequest{"main", false, 0, reclaimed_core, memory_mib, 1});
  return pod;
}

// The nodes of a test and the offline pods placed on them.
struct Cluster {
  std::vector<NodeState> nodes;
  std::vector<MovablePod> offline;

  // Places `pod` on the card at `position` of node `node` (offline pods are remembered as movable).
  void Put(size_t node, size_t position, const PodRequest& pod) {
    NodeState& n = nodes[node];
    Assignment a;
    for (const ContainerRequest& c : pod.containers)
      a.containers.push_back(ContainerAssignment{
          c.name, {CardShare{n.cards[position].card.uuid, c.CorePerCard(), c.ReclaimedCorePerCard(),
                             c.MemoryPerCardMiB()}}});
    ASSERT_TRUE(Apply(n, pod, a).ok());
    if (n.cpu_free_milli >= 0) n.cpu_free_milli -= pod.cpu_milli;
    if (pod.qos == Qos::kOffline) offline.push_back(MovablePod{pod.Key(), node, pod, a});
  }
  std::vector<const NodeState*> View() const {
    std::vector<const NodeState*> out;
    for (const NodeState& n : nodes) out.push_back(&n);
    return out;
  }
  int64_t Capacity() const { return nodes[0].cards[0].capacity_mib; }
};

std::vector<std::string> CardsOf(const NodeState& node, const Assignment& a) {
  std::vector<std::string> out;
  for (const ContainerAssignment& c : a.containers)
    for (const CardShare& s : c.cards) out.push_back(std::to_string(node.FindCard(s.uuid)->card.index));
  return out;
}

TEST(FreeCapacityShortfall, EmptyWhenTheSumsCoverThePod) {
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384)}, {}};
  c.Put(0, 0, Online("x", 60, 1024));
  c.Put(1, 0, Online("y", 60, 1024));
  // 40 + 40 percent core free: a 70 percent pod fits the sum, not a card.
  EXPECT_EQ(FreeCapacityShortfall(c.View(), Online("p", 70, 1024)), "");
}

TEST(FreeCapacityShortfall, NamesTheDimensionThatIsShort) {
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384)}, {}};
  c.Put(0, 0, Online("x", 60, 1024));
  c.Put(1, 0, Online("y", 60, 1024));
  EXPECT_EQ(FreeCapacityShortfall(c.View(), Online("p", 90, 1024)),
            "the nodes pod ns/p may use have 80 percent core free in all, it asks for 90");
  c.nodes[0].cpu_free_milli = 1000;
  c.nodes[1].cpu_free_milli = 500;
  PodRequest hungry = Online("q", 10, 1024);
  hungry.cpu_milli = 2000;
  EXPECT_EQ(FreeCapacityShortfall(c.View(), hungry),
            "the nodes pod ns/q may use have 1500 millicores of CPU free in all, it asks for 2000");
}

TEST(FreeCapacityShortfall, CountsOnlyTheNodesThePodMayUse) {
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384)}, {}};
  c.nodes[1].product = "T4";
  PodRequest pinned = Online("p", 100, 1024, 2);
  pinned.gpu_models = {"T4"};
  EXPECT_EQ(FreeCapacityShortfall(c.View(), pinned),
            "the nodes pod ns/p may use have 100 percent core free in all, it asks for 200");
}

TEST(NoNodeCouldHold, EmptyWhenANodeCouldOnceItsPodsAreGone) {
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384)}, {}};
  c.Put(0, 0, Online("x", 90, 1024));
  c.Put(1, 0, Online("y", 90, 1024));
  c.nodes[0].cpu_free_milli = c.nodes[1].cpu_free_milli = 0;  // what is left of the CPU does not count
  PodRequest pod = Online("p", 50, 8192);
  pod.cpu_milli = 1000;
  Placement scratch;
  ASSERT_FALSE(Place(c.nodes[0], pod, nullptr, scratch));
  EXPECT_EQ(NoNodeCouldHold(c.View(), pod), "");
}

// In the nodes' own reasons (SchedulerReason), counted per reason when they differ.
TEST(NoNodeCouldHold, SaysWhyInTheNodesOwnReasons) {
  Cluster c{{Node("a", 1, 81920), Node("b", 1, 81920)}, {}};
  c.Put(0, 0, Online("x", 60, 1024));
  // The sums of free core and memory would hold it: it is not fragmentation that stops it.
  const PodRequest big = Online("big", 50, 102400);
  ASSERT_EQ(FreeCapacityShortfall(c.View(), big), "");
  EXPECT_EQ(NoNodeCouldHold(c.View(), big),
            "the 2 nodes pod ns/big may use could not hold it even with no other pod on them: no mgpu card "
            "free for 50 percent core and 102400 MiB (larger than any card)");
  Cluster mixed{{Node("small", 1, 16384), Node("large", 1, 81920)}, {}};
  EXPECT_EQ(
      NoNodeCouldHold(mixed.View(), Online("wide", 50, 20000, 2)),
      "the 2 nodes pod ns/wide may use could not hold it even with no other pod on them: 1 fewer than 2 "
      "mgpu cards free for 50 percent core and 20000 MiB each (larger than any card), 1 fewer than 2 mgpu "
      "cards free for 50 percent core and 20000 MiB each (more cards than the node has)");
  Cluster sick{{Node("sick", 1, 16384)}, {}};
  sick.nodes[0].cards[0].card.healthy = false;
  EXPECT_EQ(NoNodeCouldHold(sick.View(), Online("p", 10, 1024)),
            "the one node pod ns/p may use could not hold it even with no other pod on it: no mgpu card free "
            "for 10 percent core and 1024 MiB (cards unhealthy)");
}

TEST(NoNodeCouldHold, CountsOnlyTheNodesOfTheModelsThePodMayUse) {
  Cluster c{{Node("a", 1, 81920), Node("t4", 1, 16384)}, {}};
  c.nodes[0].product = "A100";
  c.nodes[1].product = "T4";
  PodRequest pinned = Online("p", 50, 20000);
  pinned.gpu_models = {"T4"};
  EXPECT_EQ(NoNodeCouldHold(c.View(), pinned),
            "the one node pod ns/p may use could not hold it even with no other pod on it: no mgpu card free "
            "for 50 percent core and 20000 MiB (larger than any card)");
  pinned.gpu_models = {"H100", "L40S"};
  EXPECT_EQ(NoNodeCouldHold(c.View(), pinned), "no node has a GPU model pod ns/p may use (H100, L40S)");
  EXPECT_EQ(NoNodeCouldHold({}, Online("q", 50, 1024)), "no node has mgpu cards pod ns/q may use");
}

TEST(PlanDefrag, APodThatFitsGetsAnEmptyPlan) {
  Cluster c{{Node("a", 1, 16384)}, {}};
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, Online("p", 50, 1024), nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->node, 0u);
  EXPECT_TRUE(plan->moves.empty());
}

TEST(PlanDefrag, MovesTheOfflinePodThatKeepsAMultiCardPodOffItsCards) {
  // Node a: two cards with all their core free, but card 1 holds an offline pod, and multi-card pods never
  // share a card with offline pods. Node b has room for the offline pod.
  Cluster c{{Node("a", 2, 16384), Node("b", 1, 16384)}, {}};
  c.Put(0, 1, Offline("batch", 40, 2048));
  c.Put(1, 0, Online("web", 50, 2048));
  const PodRequest pod = Online("train", 100, 4096, 2);
  Placement scratch;
  ASSERT_FALSE(Place(c.nodes[0], pod, nullptr, scratch));
  ASSERT_EQ(FreeCapacityShortfall(c.View(), pod), "");

  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, pod, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->node, 0u);
  EXPECT_EQ(CardsOf(c.nodes[0], plan->cards), (std::vector<std::string>{"0", "1"}));
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "ns/batch");
  EXPECT_EQ(plan->moves[0].from, 0u);
  EXPECT_EQ(plan->moves[0].to, 1u);
  EXPECT_EQ(CardsOf(c.nodes[1], plan->moves[0].cards), (std::vector<std::string>{"0"}));
}

TEST(PlanDefrag, MovesAsFewPodsAsItCanAndMayMoveThemWithinTheNode) {
  // Two offline pods hold half of each card's memory; the pod needs more than half of one card. Moving one
  // of them is enough, and it fits beside the other.
  Cluster c{{Node("a", 2, 16384)}, {}};
  const int64_t half = c.Capacity() / 2;
  c.Put(0, 0, Offline("one", 30, half));
  c.Put(0, 1, Offline("two", 30, half));
  const PodRequest pod = Online("big", 100, half + 1024);
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, pod, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].from, 0u);
  EXPECT_EQ(plan->moves[0].to, 0u);
  EXPECT_NE(CardsOf(c.nodes[0], plan->moves[0].cards), CardsOf(c.nodes[0], plan->cards));
}

TEST(PlanDefrag, PrefersTheNodeThatNeedsFewerMoves) {
  // The pod needs all but 1,000 MiB of a card: node a's two offline pods must both go, node b's one. The
  // spare node has room for them, but not the CPU the pod asks for.
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384), Node("spare", 1, 16384)}, {}};
  c.Put(0, 0, Offline("a1", 50, 1500));
  c.Put(0, 0, Offline("a2", 50, 1500));
  c.Put(1, 0, Offline("b1", 10, 1500));
  c.nodes[2].cpu_free_milli = 500;
  PodRequest pod = Online("p", 100, c.Capacity() - 1000);
  pod.cpu_milli = 1000;
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, pod, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->node, 1u);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "ns/b1");
  EXPECT_EQ(plan->moves[0].to, 2u);  // node a's reclaimed core is all taken
}

TEST(PlanDefrag, FreesTheCpuAnOfflinePodHolds) {
  Cluster c{{Node("a", 1, 16384), Node("b", 1, 16384)}, {}};
  c.nodes[0].cpu_free_milli = 8000;
  c.nodes[1].cpu_free_milli = 8000;
  PodRequest batch = Offline("batch", 20, 1024);
  batch.cpu_milli = 6000;
  c.Put(0, 0, batch);
  c.Put(1, 0, Online("web", 90, 1024));
  PodRequest pod = Online("p", 50, 1024);
  pod.cpu_milli = 4000;  // node a's cards take it, its CPU does not; node b's card does not
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, pod, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->node, 0u);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].to, 1u);
}

TEST(PlanDefrag, NeverMovesOnlinePods) {
  Cluster c{{Node("a", 2, 16384), Node("b", 1, 16384)}, {}};
  c.Put(0, 1, Online("web", 10, 1024));
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, Online("train", 100, 1024, 2), nullptr);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.message(), "pod ns/train fits no node even with every offline pod moved off it");
}

TEST(PlanDefrag, FailsWhenTheMovedPodsFitNowhereElse) {
  Cluster c{{Node("a", 2, 16384)}, {}};
  c.Put(0, 1, Offline("batch", 40, 2048));
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, Online("train", 100, 1024, 2), nullptr);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.message(),
            "moving offline pods would make room for pod ns/train on 1 node(s), but ns/batch, which would have "
            "to move, fits nowhere else");
}

TEST(PlanDefrag, KeepsToTheNodesOfThePodsModels) {
  Cluster c{{Node("a", 2, 16384), Node("b", 2, 16384), Node("c", 1, 16384)}, {}};
  c.nodes[1].product = "T4";
  c.Put(0, 1, Offline("on-a", 40, 2048));
  c.Put(1, 1, Offline("on-b", 40, 2048));
  PodRequest pod = Online("train", 100, 1024, 2);
  pod.gpu_models = {"T4"};
  Result<DefragPlan> plan = PlanDefrag(c.View(), c.offline, pod, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->node, 1u);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "ns/on-b");
}

}  // namespace
}  // namespace mgpu
