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

NodeFree Free(std::vector<int> core, int64_t cpu_milli, int64_t memory_mib = -1,
              std::string_view product = "") {
  return NodeFree{std::move(core), cpu_milli, memory_mib, product};
}

TEST(Fragmentation, NothingObservedMeansNoFragmentation) {
  WorkloadModel w;
  EXPECT_TRUE(w.Empty());
  EXPECT_EQ(w.Fragmentation(Free({30, 100}, -1)), 0);
}

TEST(Fragmentation, FreeCoreTheWorkloadCannotFillIsLost) {
  WorkloadModel w;
  w.Observe(Online(50));
  EXPECT_FALSE(w.Empty());
  // Only 50 % pods come: 40 free on a card is lost, 60 loses the 10 a 50 % pod leaves, 100 takes two.
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({40, 60, 100}, -1)), 40 + 10);
  w.Observe(Online(70));  // now half 50 %, half 70 %: a 70 % pod leaves 30 of a whole card
  EXPECT_NEAR(w.Fragmentation(Free({40, 60, 100}, -1)), 40 + 10 + 0.5 * 30, 0.05);
}

TEST(Fragmentation, MultiCardShapesLoseTheWholeNodeWhenTooFewCardsFit) {
  WorkloadModel w;
  w.Observe(Online(200, 2));                                             // two whole cards
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100, 30}, -1)), 30);       // partial card lost
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 50, 30}, -1)), 180);       // nothing fits: all lost
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100, 100, 100}, -1)), 0);  // all usable
}

TEST(Fragmentation, ANodeShortOfCpuLosesAllItsFreeCore) {
  WorkloadModel w;
  PodRequest pod = Online(50);
  pod.cpu_milli = 8000;  // 160 milli per percent of core
  w.Observe(pod);
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({50, 100}, 24000)), 0);
  // Short of one pod's CPU: all 150 lost to the shape, and the 4000 feed only 25 of the 150.
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({50, 100}, 4000)), 150 + 125);
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({50, 100}, -1)), 0);  // CPU unknown: never short
  // Taking CPU from a node costs what its GPUs can then no longer serve.
  NodeState node = test::Node("n", 1, 24576);
  node.cpu_free_milli = 24000;
  PodRequest cpu_only;
  cpu_only.cpu_milli = 17000;  // leaves 7000: the 8000 shape no longer fits, 100 core lost
  const double short_cost = test::CostOf(node, cpu_only, NodePolicy::kFragmentation, &w);
  cpu_only.cpu_milli = 2000;  // leaves 22000: nothing lost
  const double fine_cost = test::CostOf(node, cpu_only, NodePolicy::kFragmentation, &w);
  EXPECT_GT(short_cost, fine_cost + 1);
  EXPECT_NEAR(fine_cost, 0, 1e-9);
}

TEST(Fragmentation, FreeCoreTheNodesCpuOrMemoryCannotFeedIsLost) {
  WorkloadModel w;
  PodRequest pod = Online(100);
  pod.cpu_milli = 10000;        // 100 cpu milli per percent of core
  pod.host_memory_mib = 20000;  // 200 MiB per percent
  w.Observe(pod);
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100}, 20000, 40000)), 0);  // feeds both cards
  // CPU for one and a half cards: half a card is stranded, and the node is not short of the shape's CPU.
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100}, 15000, 40000)), 50);
  // Memory for one card only: the scarcer of the two counts.
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100}, 15000, 20000)), 100);
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 100}, -1, -1)), 0);  // unknown: never short
  // So a CPU-only pod costs least where the CPU is plentiful for the free cards.
  NodeState dense = test::Node("dense", 2, 24576), roomy = test::Node("roomy", 2, 24576);
  dense.cpu_free_milli = 24000;
  roomy.cpu_free_milli = 64000;
  PodRequest cpu_only;
  cpu_only.cpu_milli = 8000;
  EXPECT_LT(test::CostOf(roomy, cpu_only, NodePolicy::kFragmentation, &w),
            test::CostOf(dense, cpu_only, NodePolicy::kFragmentation, &w));
}

TEST(Fragmentation, ANodeOfAModelAShapeMayNotUseLosesAllItsFreeCoreToIt) {
  WorkloadModel w;
  PodRequest t4 = Online(50);
  t4.gpu_models = {"T4"};
  w.Observe(t4);
  w.Observe(Online(50));
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({100, 50}, -1, -1, "T4")), 0);
  EXPECT_NEAR(w.Fragmentation(Free({100, 50}, -1, -1, "A100")), 0.5 * 150, 0.1);  // never named: other
  // Unconstrained pods go where the constrained ones cannot: a T4 node's capacity is kept for them.
  NodeState on_t4 = test::Node("t", 1, 24576), on_a100 = test::Node("a", 1, 24576);
  on_t4.product = "T4";
  on_a100.product = "A100";
  PodRequest any = Online(50);
  EXPECT_LT(test::CostOf(on_a100, any, NodePolicy::kFragmentation, &w),
            test::CostOf(on_t4, any, NodePolicy::kFragmentation, &w));
}

TEST(Fragmentation, PressureIsTheShareOfAModelsFreeCoreItsBoundShapesClaim) {
  WorkloadModel w(1.0);  // no decay: each shape a third of the demand
  PodRequest t4 = Online(50), t4_or_v100 = Online(50);
  t4.gpu_models = {"T4"};
  t4_or_v100.gpu_models = {"T4", "V100"};
  w.Observe(t4);
  w.Observe(t4_or_v100);
  w.Observe(Online(50));
  EXPECT_EQ(w.Pressure("T4"), 0);  // no cluster view yet
  // 1,200 free: T4 only claims a third of it from T4's 300; T4-or-V100 a third from 600, half on each.
  w.SetClusterFree({{{"T4", 300}, {"V100", 300}, {"G2", 600}}, {}});
  EXPECT_DOUBLE_EQ(w.Pressure("T4"), 400.0 / 300 + 400.0 / 600);
  EXPECT_DOUBLE_EQ(w.Pressure("V100"), 400.0 / 600);
  EXPECT_EQ(w.Pressure("G2"), 0);
  EXPECT_EQ(w.Pressure("A100"), 0);
  // More T4 left, less pressure on it.
  w.SetClusterFree({{{"T4", 900}, {"V100", 300}, {"G2", 600}}, {}});
  EXPECT_DOUBLE_EQ(w.Pressure("T4"), 600.0 / 900 + 600.0 / 1200);
  w.Observe(Online(50));  // learning more keeps the cluster view
  EXPECT_GT(w.Pressure("T4"), 0);
}

// The fuller T4 node wins on fragmentation alone; once T4 is scarce for the pods bound to it, an unbound pod
// goes to the G2 node instead.
TEST(Fragmentation, UnboundPodsLeaveAPressedModelToThePodsBoundToIt) {
  WorkloadModel w(1.0);
  PodRequest t4 = Online(50);
  t4.gpu_models = {"T4"};
  w.Observe(t4);
  for (int i = 0; i < 99; ++i) w.Observe(Online(50));
  NodeState on_t4 = test::Node("t", 1, 24576), on_g2 = test::Node("g", 1, 24576);
  on_t4.product = "T4";
  on_t4.cards[0].usage = {50, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};
  on_g2.product = "G2";
  const PodRequest any = Online(50);
  EXPECT_LT(test::CostOf(on_t4, any, NodePolicy::kFragmentation, &w),
            test::CostOf(on_g2, any, NodePolicy::kFragmentation, &w));
  w.SetClusterFree({{{"T4", 50}, {"G2", 10000}}, {}});
  EXPECT_GT(test::CostOf(on_t4, any, NodePolicy::kFragmentation, &w),
            test::CostOf(on_g2, any, NodePolicy::kFragmentation, &w));
}

// Once the pods bound to a model claim all of its free core, a core an unbound pod takes there is a core a
// bound pod will lack: the node's fragmentation grows by the whole of it (issue #25: a quarter of that let
// unbound pods take the scarce models on some seeds of the lists with 30 % of the GPU pods pinned).
TEST(Fragmentation, AtFullPressureEveryCoreTakenFromTheModelCountsAsLost) {
  WorkloadModel w(1.0);
  PodRequest t4 = Online(50);
  t4.gpu_models = {"T4"};
  w.Observe(t4);
  w.Observe(Online(50));
  w.SetClusterFree({{{"T4", 100}, {"G2", 10000}}, {}});
  ASSERT_GE(w.Pressure("T4"), 1);
  // A 50 % pod leaves 50 % that the shapes fill: only the pressure term moves.
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({50}, -1, -1, "T4")) - w.Fragmentation(Free({100}, -1, -1, "T4")),
                   50);
  EXPECT_DOUBLE_EQ(w.Fragmentation(Free({50}, -1, -1, "G2")) - w.Fragmentation(Free({100}, -1, -1, "G2")),
                   -25);  // a G2 card is lost to the T4-bound half of the workload
}

// A rare 8-card shape among one-card pods: breaking into a node that could take it costs the shape's small
// weight while many nodes could; once its share of the demand would fill every node that still could, such a
// node is worth its cards (issue 41: on openb the 8-card pods failed where one-card pods had broken into the
// last nodes with 8 free cards).
TEST(Fragmentation, TheLastNodesAMultiCardShapeNeedsAreWorthKeeping) {
  WorkloadModel w(1.0);
  for (int i = 0; i < 99; ++i) w.Observe(Online(100));
  w.Observe(Online(800, 8));
  const NodeFree whole = Free(std::vector<int>(8, 100), -1);
  NodeFree broken = whole, more_broken = whole;
  broken.core[0] = 0;
  more_broken.core[0] = more_broken.core[1] = 0;
  const auto breaking = [&] { return w.Fragmentation(broken) - w.Fragmentation(whole); };
  const auto breaking_more = [&] { return w.Fragmentation(more_broken) - w.Fragmentation(broken); };
  EXPECT_DOUBLE_EQ(breaking(), 0.01 * 700);  // the node's 700 lost to a hundredth of the pods
  const double before = breaking_more();
  const auto cluster = [](int whole_nodes, int broken_nodes) {
    ClusterFree c;
    for (int i = 0; i < whole_nodes + broken_nodes; ++i) {
      NodeState node = test::Node("n" + std::to_string(i), 8, 24576);
      if (i >= whole_nodes) node.cards[0].usage.core = 100;
      c.Add(node);
    }
    return c;
  };
  w.SetClusterFree(cluster(100, 0));  // the shape's share would fill 7.5 of the 100 that could take it
  const double plenty = breaking();
  EXPECT_GT(plenty, 0.01 * 700);
  w.SetClusterFree(cluster(1, 99));  // ... 6.6 nodes, and one could
  EXPECT_GT(breaking(), plenty + 30);
  EXPECT_DOUBLE_EQ(breaking_more(), before);  // a node that could not take it already is not worth more
  w.SetClusterFree(ClusterFree{{{"", 70100}}, {}});  // the nodes not known: as before
  EXPECT_DOUBLE_EQ(breaking(), 0.01 * 700);
}

// A publisher learns pod by pod and builds the tables when it publishes: the published model decides exactly
// as one that observed every pod.
TEST(Fragmentation, LearnedShapesCountOnceTheClusterIsSet) {
  WorkloadModel observed, learned;
  std::vector<PodRequest> pods = {Online(81),  Online(47),     Online(32),
                                  Online(100), Online(200, 2), Online(47)};
  pods[2].gpu_models = {"T4"};
  for (const PodRequest& pod : pods) {
    observed.Observe(pod);
    learned.Learn(pod);
  }
  const ClusterFree free{{{"T4", 300}, {"V100", 900}}, {}};
  observed.SetClusterFree(free);
  learned.SetClusterFree(free);
  for (const NodeFree& node : {Free({53, 68}, 8000), Free({19, 100}, -1), Free({36}, 500)}) {
    NodeFree t4 = node;
    t4.product = "T4";
    EXPECT_DOUBLE_EQ(learned.Fragmentation(node), observed.Fragmentation(node));
    EXPECT_DOUBLE_EQ(learned.Fragmentation(t4), observed.Fragmentation(t4));
  }
  EXPECT_GT(learned.Pressure("T4"), 0);
  EXPECT_DOUBLE_EQ(learned.Pressure("T4"), observed.Pressure("T4"));
}

TEST(Fragmentation, OlderShapesDecay) {
  WorkloadModel w(0.5);
  w.Observe(Online(80));
  for (int i = 0; i < 20; ++i) w.Observe(Online(20));
  // 80 % pods are all but forgotten: a card with 60 free is almost surely filled by three 20 % pods.
  EXPECT_LT(w.Fragmentation(Free({60}, -1)), 0.01);
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

// What the fitting shapes leave counts, not only whether they fit: among mostly whole-card pods, a 32 % pod
// goes beside another 32 % one (leaving 36 %, which a third fills) rather than beside a 47 % one (leaving
// 21 %, which no shape of the workload fits). FGD's measure took the 47 % card: there the 53 % free was lost
// to more shapes before.
TEST(Fragmentation, CardChoiceCountsWhatTheFittingShapesLeave) {
  WorkloadModel w;
  for (int i = 0; i < 10; ++i) w.Observe(Online(100));
  for (int i = 0; i < 3; ++i) w.Observe(Online(81));
  for (int i = 0; i < 2; ++i) w.Observe(Online(47));
  w.Observe(Online(32));
  NodeState node = test::Node("n", 2, 24576);
  node.cards[0].usage = {47, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};  // 53 free
  node.cards[1].usage = {32, 0, 0, 1, 0, 0, 0, ComputePolicy::kFixedShare};  // 68 free
  EXPECT_EQ(ChooseCards(node, Online(32), &w)->containers[0].cards[0].uuid, "GPU-n-1");
  // A 21 % gap is all but lost, a 36 % gap mostly filled.
  EXPECT_GT(w.Fragmentation(Free({21}, -1)), 20);
  EXPECT_LT(w.Fragmentation(Free({36}, -1)), 5);
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
  // With 70 % pods as well, a 30 % pod on the empty card leaves 70 (a 70 % pod fills it): on the half card
  // it leaves 20 (lost).
  for (int i = 0; i < 10; ++i) w.Observe(Online(70));
  PodRequest small = Online(30);
  EXPECT_LT(test::CostOf(empty, small, NodePolicy::kFragmentation, &w),
            test::CostOf(exact, small, NodePolicy::kFragmentation, &w));
}

}  // namespace
}  // namespace mgpu
