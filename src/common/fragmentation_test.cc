#include "common/fragmentation.h"

#include <gtest/gtest.h>

#include "common/allocator.h"
#include "common/test_util.h"

namespace mgpu {
namespace {

PodRequest Online(int core, int cards = 1) {
  PodRequest p;
  p.namespace_name = "ns";
  p.name = "p";
  p.card_policy = CardPolicy::kFragmentation;
  p.node_policy = NodePolicy::kFragmentation;
  p.containers.push_back(ContainerRequest{"c", false, core, 0, 0, cards});
  return p;
}

TEST(Fragmentation, NothingObservedMeansNoFragmentation) {
  WorkloadModel w;
  EXPECT_TRUE(w.Empty());
  EXPECT_EQ(w.Fragmentation(std::vector<int>{30, 100}, -1), 0);
}

TEST(Fragmentation, FreeCoreTooSmallForTheWorkloadIsLost) {
  WorkloadModel w;
  w.Observe(Online(50));
  EXPECT_FALSE(w.Empty());
  // Only 50 % pods come: 40 free on a card is lost, 60 and 100 are usable.
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{40, 60, 100}, -1), 40);
  w.Observe(Online(70));  // now half 50 %, half 70 %
  EXPECT_NEAR(w.Fragmentation(std::vector<int>{40, 60, 100}, -1), 40 + 0.5 * 60, 0.05);
}

TEST(Fragmentation, MultiCardShapesLoseTheWholeNodeWhenTooFewCardsFit) {
  WorkloadModel w;
  w.Observe(Online(200, 2));                                                       // two whole cards
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{100, 100, 30}, -1), 30);       // partial card lost
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{100, 50, 30}, -1), 180);       // nothing fits: all lost
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{100, 100, 100, 100}, -1), 0);  // all usable
}

TEST(Fragmentation, ANodeShortOfCpuLosesAllItsFreeCore) {
  WorkloadModel w;
  PodRequest pod = Online(50);
  pod.cpu_milli = 8000;
  w.Observe(pod);
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{50, 100}, 16000), 0);
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{50, 100}, 4000), 150);
  EXPECT_DOUBLE_EQ(w.Fragmentation(std::vector<int>{50, 100}, -1), 0);  // CPU unknown: never short
  // Taking CPU from a node costs what its GPUs can then no longer serve.
  NodeState node = test::Node("n", 1, 24576);
  node.cpu_free_milli = 10000;
  PodRequest cpu_only;
  cpu_only.cpu_milli = 4000;  // leaves 6000: the 8000 shape no longer fits, 100 core lost
  const double short_cost = test::CostOf(node, cpu_only, NodePolicy::kFragmentation, &w);
  cpu_only.cpu_milli = 2000;  // leaves 8000: nothing lost
  const double fine_cost = test::CostOf(node, cpu_only, NodePolicy::kFragmentation, &w);
  EXPECT_GT(short_cost, fine_cost + 1);
  EXPECT_NEAR(fine_cost, 0, 1e-9);
}

TEST(Fragmentation, OlderShapesDecay) {
  WorkloadModel w(0.5);
  w.Observe(Online(80));
  for (int i = 0; i < 20; ++i) w.Observe(Online(20));
  // 80 % pods are all but forgotten: a 50 % card is almost fully usable.
  EXPECT_LT(w.Fragmentation(std::vector<int>{50}, -1), 0.01);
}

TEST(Fragmentation, OfflinePodsAreNotTheOnlineWorkload) {
  WorkloadModel w;
  PodRequest off = Online(0);
  off.qos = Qos::kOffline;
  off.containers[0].reclaimed_core = 30;
  w.Observe(off);
  EXPECT_TRUE(w.Empty());
}

TEST(Fragmentation, FreeCoreSkipsUnhealthyAndDedicatedCards) {
  NodeState node = test::Node("n", 3, 24576);
  node.cards[0].usage.core = 30;
  node.cards[1].card.healthy = false;
  node.cards[2].usage.exclusive_holders = 1;
  std::vector<int> free;
  FreeCore(node, nullptr, free);
  EXPECT_EQ(free, (std::vector<int>{70, 0, 0}));
  std::vector<CardUsage> usage = {CardUsage{}, CardUsage{}, CardUsage{}};
  usage[0].core = 60;
  FreeCore(node, &usage, free);
  EXPECT_EQ(free, (std::vector<int>{40, 0, 100}));
}

// The card choice keeps the card the workload can still use.
TEST(Fragmentation, CardChoiceAvoidsLeavingUnusableRemainders) {
  WorkloadModel w;
  for (int i = 0; i < 10; ++i) w.Observe(Online(50));
  NodeState node = test::Node("n", 2, 24576);
  node.cards[0].usage = {30, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};  // 70 free
  node.cards[1].usage = {50, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};  // 50 free
  // A 20 % pod: binpack takes the fuller card 1 (leaving 30, useless to 50 % pods); fragmentation takes card
  // 0 (leaving 50, just right).
  PodRequest pod = Online(20);
  pod.card_policy = CardPolicy::kBinpack;
  EXPECT_EQ(ChooseCards(node, pod, &w)->containers[0].cards[0].uuid, "GPU-n-1");
  pod.card_policy = CardPolicy::kFragmentation;
  EXPECT_EQ(ChooseCards(node, pod, &w)->containers[0].cards[0].uuid, "GPU-n-0");
  EXPECT_EQ(ChooseCards(node, pod, nullptr)->containers[0].cards[0].uuid, "GPU-n-1");  // no model: binpack
}

TEST(Fragmentation, NodeCostIsTheGrowthOfFragmentation) {
  WorkloadModel w;
  for (int i = 0; i < 10; ++i) w.Observe(Online(50));
  NodeState exact = test::Node("a", 1, 24576);
  exact.cards[0].usage = {50, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};
  NodeState empty = test::Node("b", 1, 24576);
  PodRequest pod = Online(50);
  const double on_exact = test::CostOf(exact, pod, NodePolicy::kFragmentation, &w);
  const double on_empty = test::CostOf(empty, pod, NodePolicy::kFragmentation, &w);
  EXPECT_LT(on_exact, on_empty + 1e-9);
  // A 30 % pod on the empty card leaves 70 (usable): on the half card it leaves 20 (lost).
  PodRequest small = Online(30);
  EXPECT_LT(test::CostOf(empty, small, NodePolicy::kFragmentation, &w),
            test::CostOf(exact, small, NodePolicy::kFragmentation, &w));
}

}  // namespace
}  // namespace mgpu
