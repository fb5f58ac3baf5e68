#include "common/allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "common/test_util.h"

namespace mgpu {
namespace {

using test::CostOf;
using test::Node;

PodRequest Online(const std::string& name, int core, int64_t memory_mib, int cards = 1,
                  ComputePolicy policy = ComputePolicy::kFixedShare) {
  PodRequest p;
  p.namespace_name = "ns";
  p.name = name;
  p.qos = Qos::kOnline;
  p.compute_policy = policy;
  p.containers.push_back(ContainerRequest{"c", false, core, 0, memory_mib, cards});
  return p;
}

PodRequest Offline(const std::string& name, int reclaimed, int64_t memory_mib,
                   ComputePolicy policy = ComputePolicy::kFixedShare) {
  PodRequest p = Online(name, 0, memory_mib, 1, policy);
  p.qos = Qos::kOffline;
  p.containers[0].reclaimed_core = reclaimed;
  return p;
}

// Chooses and applies; returns the cards (by index) the pod got, or the error text.
struct Placed {
  std::vector<int> cards;
  std::string error;
  Assignment assignment;
};

Placed ChooseAndApply(NodeState& node, const PodRequest& pod) {
  Placed out;
  auto a = ChooseCards(node, pod);
  if (!a.ok()) {
    out.error = a.message();
    return out;
  }
  Status s = Apply(node, pod, *a);
  EXPECT_TRUE(s.ok()) << s.message();
  for (const auto& ca : a->containers) {
    for (const auto& share : ca.cards) out.cards.push_back(node.FindCard(share.uuid)->card.index);
  }
  out.assignment = *a;
  return out;
}

TEST(Allocator, OnlinePodGetsItsShareOnOneCard) {
  NodeState node = Node("n", 1, 24576);
  auto a = ChooseCards(node, Online("p", 30, 4096));
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_EQ(a->containers.size(), 1u);
  EXPECT_EQ(a->containers[0].container, "c");
  EXPECT_EQ(a->containers[0].cards, (std::vector<CardShare>{{"GPU-n-0", 30, 0, 4096}}));
  ASSERT_TRUE(Apply(node, Online("p", 30, 4096), *a).ok());
  EXPECT_EQ(node.cards[0].usage.core, 30);
  EXPECT_EQ(node.cards[0].usage.memory_mib, 4096);
  EXPECT_EQ(node.cards[0].usage.holders, 1);
}

TEST(Allocator, OnlineAndOfflineShareOneCardWithIndependentCores) {
  NodeState node = Node("n", 1, 24576);
  EXPECT_EQ(ChooseAndApply(node, Online("on1", 30, 4096)).cards, std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Offline("off1", 30, 4096)).cards, std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Online("on2", 70, 4096)).cards, std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Offline("off2", 70, 4096)).cards, std::vector<int>{0});
  const CardUsage& u = node.cards[0].usage;
  EXPECT_EQ(u.core, 100);
  EXPECT_EQ(u.reclaimed_core, 100);
  EXPECT_EQ(u.memory_mib, 16384);
  EXPECT_EQ(u.offline_holders, 2);
  EXPECT_EQ(ChooseAndApply(node, Online("on3", 5, 1024)).error,
            "no card can take 5 percent core and 1024 MiB for container c: best card GPU-n-0 (index 0) has 0 "
            "percent core "
            "and 8192 "
            "MiB free");
  EXPECT_EQ(ChooseAndApply(node, Offline("off3", 5, 1024)).error,
            "no card can take 5 percent reclaimed core and 1024 MiB for container c: best card GPU-n-0 "
            "(index 0) has 0 percent "
            "reclaimed core and 8192 MiB free");
}

TEST(Allocator, OnlineCoresNeverPassOneHundred) {
  NodeState node = Node("n", 1, 24576);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(ChooseAndApply(node, Online("p" + std::to_string(i), 30, 4096)).error.empty());
  EXPECT_EQ(ChooseAndApply(node, Online("p3", 30, 4096)).error,
            "no card can take 30 percent core and 4096 MiB for container c: best card GPU-n-0 (index 0) has "
            "10 percent core and "
            "12288 MiB free");
  EXPECT_TRUE(ChooseAndApply(node, Online("p4", 10, 4096)).error.empty());
}

TEST(Allocator, MemoryIsNeverOversubscribedAcrossOnlineAndOffline) {
  NodeState node = Node("n", 1, 24576);
  EXPECT_TRUE(ChooseAndApply(node, Online("on", 10, 20480)).error.empty());
  EXPECT_FALSE(ChooseAndApply(node, Offline("off", 10, 5000)).error.empty());
  EXPECT_TRUE(ChooseAndApply(node, Offline("off", 10, 4096)).error.empty());
  EXPECT_EQ(node.cards[0].FreeMemoryMiB(), 0);
}

TEST(Allocator, CapacityIsMemoryLessReservedRoundedToTheUnit) {
  Config config;
  config.reserved_memory_mib = 500;
  config.memory_unit_mib = 64;
  NodeState node = Node("n", 1, 24576, config);
  EXPECT_EQ(node.cards[0].capacity_mib, (24576 - 500) / 64 * 64);
  config.reserved_memory_mib = 30000;
  EXPECT_EQ(Node("n", 1, 24576, config).cards[0].capacity_mib, 0);
}

TEST(Allocator, FirstPodSetsTheCardsComputePolicyUntilTheCardEmpties) {
  NodeState node = Node("n", 1, 24576);
  Placed first = ChooseAndApply(node, Online("fixed", 30, 4096, 1, ComputePolicy::kFixedShare));
  ASSERT_TRUE(first.error.empty());
  EXPECT_EQ(
      ChooseAndApply(node, Online("burst", 30, 4096, 1, ComputePolicy::kGuaranteedBurstShare)).error,
      "no card can take 30 percent core and 4096 MiB for container c: 1 card holding another compute policy");
  ASSERT_TRUE(Release(node, Online("fixed", 30, 4096), first.assignment).ok());
  EXPECT_TRUE(
      ChooseAndApply(node, Online("burst", 30, 4096, 1, ComputePolicy::kGuaranteedBurstShare)).error.empty());
  EXPECT_EQ(node.cards[0].usage.policy, ComputePolicy::kGuaranteedBurstShare);
}

TEST(Allocator, NativeBurstOnlineNeverSharesWithOffline) {
  NodeState node = Node("n", 2, 24576);
  EXPECT_EQ(ChooseAndApply(node, Offline("off", 30, 4096, ComputePolicy::kFixedShare)).cards,
            std::vector<int>{0});
  // The native-burst pod avoids the offline card.
  EXPECT_EQ(ChooseAndApply(node, Online("native", 30, 4096, 1, ComputePolicy::kNativeBurstShare)).cards,
            std::vector<int>{1});
  // And no offline pod joins the native-burst card, whatever its policy.
  EXPECT_EQ(ChooseAndApply(node, Offline("off2", 30, 4096, ComputePolicy::kFixedShare)).cards,
            std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Offline("off3", 30, 4096, ComputePolicy::kGuaranteedBurstShare)).error,
            "no card can take 30 percent reclaimed core and 4096 MiB for container c: 2 cards holding "
            "another compute "
            "policy");
}

TEST(Allocator, MultiCardPodsNeverShareACardWithOffline) {
  NodeState node = Node("n", 3, 24576);
  EXPECT_EQ(ChooseAndApply(node, Offline("off", 30, 4096)).cards, std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Online("two", 100, 8192, 2)).cards, (std::vector<int>{1, 2}));
  NodeState small = Node("m", 2, 24576);
  EXPECT_TRUE(ChooseAndApply(small, Offline("off", 30, 4096)).error.empty());
  EXPECT_EQ(ChooseAndApply(small, Online("two", 100, 8192, 2)).error,
            "needs 2 cards with 50 percent core and 4096 MiB each, 1 can take it for container c: best card "
            "GPU-m-1 "
            "(index 1) has 100 percent core and 24576 MiB free; 1 card not shareable between offline and "
            "multi-card pods");
  NodeState held = Node("h", 2, 24576);
  EXPECT_TRUE(ChooseAndApply(held, Online("two", 60, 8192, 2)).error.empty());
  EXPECT_EQ(ChooseAndApply(held, Offline("off", 30, 4096)).error,
            "no card can take 30 percent reclaimed core and 4096 MiB for container c: 2 cards not shareable "
            "between "
            "offline "
            "and multi-card pods");
  // Single-card online pods still share with the multi-card pod.
  EXPECT_TRUE(ChooseAndApply(held, Online("one", 30, 4096)).error.empty());
}

TEST(Allocator, UnhealthyCardsTakeNothingNew) {
  NodeState node = Node("n", 2, 24576);
  node.cards[0].card.healthy = false;
  EXPECT_EQ(ChooseAndApply(node, Online("p", 30, 4096)).cards, std::vector<int>{1});
  node.cards[1].card.healthy = false;
  EXPECT_EQ(ChooseAndApply(node, Online("q", 30, 4096)).error,
            "no card can take 30 percent core and 4096 MiB for container c: 2 cards unhealthy");
}

// The reason kube-scheduler shows after a count of nodes: the pod's own amounts and the cause, nothing that
// differs from node to node (card names, free amounts, counts of cards), so that nodes failing alike add up.
TEST(Allocator, SchedulerReasonIsTheSameForEveryNodeFailingAlike) {
  const auto reason = [](const NodeState& node, const PodRequest& pod) {
    Placement placed;
    EXPECT_FALSE(Place(node, pod, nullptr, placed));
    return SchedulerReason(node, pod, placed);
  };
  NodeState full = Node("full", 1, 24576), fuller = Node("fuller", 3, 81920);
  ASSERT_TRUE(ChooseAndApply(full, Online("a", 80, 4096)).error.empty());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(ChooseAndApply(fuller, Online("b" + std::to_string(i), 90, 1024)).error.empty());
  EXPECT_EQ(reason(full, Online("p", 30, 4096)), "no mgpu card free for 30 percent core and 4096 MiB");
  EXPECT_EQ(reason(fuller, Online("p", 30, 4096)), reason(full, Online("p", 30, 4096)));
  // Another cause than free capacity on some card: the one that turned away the most cards.
  NodeState mixed = Node("mixed", 3, 24576);
  ASSERT_TRUE(ChooseAndApply(mixed, Online("burst", 30, 4096, 1, ComputePolicy::kGuaranteedBurstShare))
                  .error.empty());
  mixed.cards[1].card.healthy = false;
  mixed.cards[2].card.healthy = false;
  EXPECT_EQ(reason(mixed, Online("p", 30, 4096)),
            "no mgpu card free for 30 percent core and 4096 MiB (cards unhealthy)");
  NodeState two = Node("two", 2, 24576);
  ASSERT_TRUE(ChooseAndApply(two, Online("a", 80, 4096)).error.empty());
  EXPECT_EQ(reason(two, Online("wide", 100, 8192, 2)),
            "fewer than 2 mgpu cards free for 50 percent core and 4096 MiB each");
  PodRequest pair = Online("pair", 30, 4096);
  pair.containers.push_back(ContainerRequest{"d", false, 90, 0, 4096, 1});
  EXPECT_EQ(reason(full, pair), "no mgpu card free for 30 percent core and 4096 MiB for container c");
  EXPECT_EQ(reason(Node("none", 0, 24576), Online("p", 30, 4096)), "no mgpu cards");
  // More memory than any card has: that is the cause, not the rule that turned away the most cards (on
  // `mixed`, unhealthy), and nodes of any card size say it alike.
  EXPECT_EQ(reason(mixed, Online("huge", 30, 30000)),
            "no mgpu card free for 30 percent core and 30000 MiB (larger than any card)");
  EXPECT_EQ(reason(Node("small", 4, 16384), Online("huge", 30, 30000)),
            reason(mixed, Online("huge", 30, 30000)));
  EXPECT_EQ(reason(two, Online("wide", 100, 2 * 30000, 2)),
            "fewer than 2 mgpu cards free for 50 percent core and 30000 MiB each (larger than any card)");
  // More cards than the node has: that is the cause, whatever its cards have free.
  EXPECT_EQ(
      reason(Node("one", 1, 24576), Online("wide", 100, 8192, 2)),
      "fewer than 2 mgpu cards free for 50 percent core and 4096 MiB each (more cards than the node has)");
  // One card large enough, even taken: not larger than any card.
  NodeState big_taken = Node("big-taken", 1, 81920);
  ASSERT_TRUE(ChooseAndApply(big_taken, Online("a", 30, 4096, 1, ComputePolicy::kGuaranteedBurstShare))
                  .error.empty());
  EXPECT_EQ(reason(big_taken, Online("p", 30, 30000)),
            "no mgpu card free for 30 percent core and 30000 MiB (cards holding another compute policy)");
}

TEST(Allocator, MultiCardPodTakesDistinctCardsEachWithAnEqualShare) {
  NodeState node = Node("n", 4, 81920);
  Placed p = ChooseAndApply(node, Online("quad", 400, 4 * 20480, 4));
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.cards, (std::vector<int>{0, 1, 2, 3}));
  for (const CardState& c : node.cards) {
    EXPECT_EQ(c.usage.core, 100);
    EXPECT_EQ(c.usage.memory_mib, 20480);
    EXPECT_EQ(c.usage.multi_card_holders, 1);
  }
}

TEST(Allocator, WholeCardPodTakesAFullCard) {
  NodeState node = Node("n", 2, 24576);
  EXPECT_EQ(ChooseAndApply(node, Online("small", 30, 4096)).cards, std::vector<int>{0});
  EXPECT_EQ(ChooseAndApply(node, Online("whole", 100, 24576)).cards, std::vector<int>{1});
  EXPECT_FALSE(ChooseAndApply(node, Online("whole2", 100, 24576)).error.empty());
}

TEST(Allocator, BinpackTakesTheFullestFeasibleCardSpreadTheEmptiest) {
  NodeState node = Node("n", 4, 24576);
  // Card 1 is fullest, card 3 half full, cards 0 and 2 empty.
  ASSERT_TRUE(Apply(node, Online("a", 70, 16384), Assignment{{{"c", {{"GPU-n-1", 70, 0, 16384}}}}}).ok());
  ASSERT_TRUE(Apply(node, Online("b", 50, 8192), Assignment{{{"c", {{"GPU-n-3", 50, 0, 8192}}}}}).ok());
  PodRequest binpack = Online("p", 20, 4096);
  EXPECT_EQ(ChooseCards(node, binpack)->containers[0].cards[0].uuid, "GPU-n-1");
  PodRequest tight = Online("p", 40, 4096);  // does not fit card 1: the next fullest is card 3
  EXPECT_EQ(ChooseCards(node, tight)->containers[0].cards[0].uuid, "GPU-n-3");
  PodRequest spread = Online("p", 20, 4096);
  spread.card_policy = CardPolicy::kSpread;
  EXPECT_EQ(ChooseCards(node, spread)->containers[0].cards[0].uuid,
            "GPU-n-0");  // tie of 0 and 2: lower index
  PodRequest spread2 = Online("p", 20, 4096, 2);
  spread2.card_policy = CardPolicy::kSpread;
  auto two = ChooseCards(node, spread2);
  EXPECT_EQ(two->containers[0].cards[0].uuid, "GPU-n-0");
  EXPECT_EQ(two->containers[0].cards[1].uuid, "GPU-n-2");
}

TEST(Allocator, ChoiceIsDeterministic) {
  NodeState node = Node("n", 8, 81920);
  auto first = ChooseCards(node, Online("p", 30, 4096, 1));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(*ChooseCards(node, Online("p", 30, 4096, 1)), *first);
  EXPECT_EQ(first->containers[0].cards[0].uuid, "GPU-n-0");
}

TEST(Allocator, LaterContainersOfAPodSeeEarlierOnesCards) {
  NodeState node = Node("n", 2, 24576);
  PodRequest pod = Online("p", 60, 4096);
  pod.containers.push_back(ContainerRequest{"d", false, 60, 0, 4096, 1});
  auto a = ChooseCards(node, pod);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->containers[0].cards[0].uuid, "GPU-n-0");
  EXPECT_EQ(a->containers[1].cards[0].uuid, "GPU-n-1");
  ASSERT_TRUE(Apply(node, pod, *a).ok());
  pod.name = "q";
  EXPECT_EQ(ChooseCards(node, pod).message(),
            "no card can take 60 percent core and 4096 MiB for container c: best card GPU-n-0 (index 0) has "
            "40 percent core and "
            "20480 MiB free");
}

TEST(Allocator, DedicatedPodsNeedEmptyCardsAndKeepThemAlone) {
  NodeState node = Node("n", 2, 24576);
  EXPECT_EQ(ChooseAndApply(node, Online("shared", 10, 1024)).cards, std::vector<int>{0});
  PodRequest dedicated = Online("ded", 100, 24576);
  dedicated.dedicated = true;
  EXPECT_EQ(ChooseAndApply(node, dedicated).cards, std::vector<int>{1});
  EXPECT_EQ(ChooseAndApply(node, Offline("off", 10, 1024)).cards,
            std::vector<int>{0});  // not on the dedicated card
  PodRequest again = Online("ded2", 100, 1024);
  again.dedicated = true;
  EXPECT_EQ(ChooseAndApply(node, again).error,
            "no card can take 100 percent core and 1024 MiB for container c: 1 card held whole by a "
            "dedicated_cores "
            "pod, 1 "
            "card in use while a dedicated_cores pod needs an empty card");
}

TEST(Allocator, ApplyChecksEveryShareAndChangesNothingOnError) {
  NodeState node = Node("n", 2, 24576);
  const NodeState before = node;
  PodRequest pod = Online("p", 60, 8192, 2);
  auto expect_error = [&](const Assignment& a, const std::string& error) {
    Status s = Apply(node, pod, a);
    EXPECT_EQ(s.message(), error);
    EXPECT_EQ(node.cards[0].usage, before.cards[0].usage);
    EXPECT_EQ(node.cards[1].usage, before.cards[1].usage);
  };
  expect_error(Assignment{}, "assignment for pod ns/p covers 0 containers, the pod has 1 GPU containers");
  expect_error(Assignment{{{"x", {{"GPU-n-0", 30, 0, 4096}, {"GPU-n-1", 30, 0, 4096}}}}},
               "assignment for pod ns/p container c is missing");
  expect_error(Assignment{{{"c", {{"GPU-n-0", 30, 0, 4096}}}}},
               "assignment for pod ns/p container c has 1 card, the container asks for 2");
  expect_error(Assignment{{{"c", {{"GPU-n-0", 30, 0, 4096}, {"GPU-n-0", 30, 0, 4096}}}}},
               "assignment for pod ns/p container c names card GPU-n-0 twice");
  expect_error(Assignment{{{"c", {{"GPU-n-0", 30, 0, 4096}, {"GPU-x", 30, 0, 4096}}}}},
               "assignment for pod ns/p container c names card GPU-x, which node n does not have");
  expect_error(
      Assignment{{{"c", {{"GPU-n-0", 30, 0, 4096}, {"GPU-n-1", 40, 0, 4096}}}}},
      "assignment for pod ns/p container c gives card GPU-n-1 other amounts than the container asks for per "
      "card");
  node.cards[1].usage.core = 80;
  node.cards[1].usage.holders = 1;
  const NodeState busy = node;
  Status s = Apply(node, pod, Assignment{{{"c", {{"GPU-n-0", 30, 0, 4096}, {"GPU-n-1", 30, 0, 4096}}}}});
  EXPECT_EQ(
      s.message(),
      "assignment for pod ns/p container c does not fit card GPU-n-1 on node n: the card is short of core");
  EXPECT_EQ(node.cards[0].usage, busy.cards[0].usage);  // card 0 was not half-allocated
}

TEST(Allocator, ReleaseRestoresUsageAndRefusesWhatWasNotApplied) {
  NodeState node = Node("n", 2, 24576);
  const NodeState empty = node;
  Placed a = ChooseAndApply(node, Online("a", 30, 4096));
  Placed b = ChooseAndApply(node, Offline("b", 40, 2048));
  ASSERT_TRUE(Release(node, Online("a", 30, 4096), a.assignment).ok());
  ASSERT_TRUE(Release(node, Offline("b", 40, 2048), b.assignment).ok());
  EXPECT_EQ(node.cards[0].usage, empty.cards[0].usage);
  Status twice = Release(node, Online("a", 30, 4096), a.assignment);
  EXPECT_EQ(twice.message(), "releasing pod ns/a container c: card GPU-n-0 does not hold that share");
  EXPECT_EQ(node.cards[0].usage, empty.cards[0].usage);
  EXPECT_EQ(Release(node, Online("a", 30, 4096), Assignment{{{"zz", {{"GPU-n-0", 30, 0, 4096}}}}}).message(),
            "releasing pod ns/a container zz: the pod has no such GPU container");
}

TEST(Allocator, FailureOnANodeWithNoCards) {
  NodeState node = Node("n", 0, 0);
  EXPECT_EQ(ChooseCards(node, Online("p", 30, 4096)).message(),
            "no card can take 30 percent core and 4096 MiB for container c: the node has no cards");
}

TEST(Allocator, CostsPreferFullerNodesForBinpackEmptierForSpread) {
  NodeState empty = Node("e", 2, 24576);
  NodeState busy = Node("b", 2, 24576);
  ASSERT_TRUE(ChooseAndApply(busy, Online("x", 100, 24576)).error.empty());
  PodRequest pod = Online("p", 50, 12288);
  EXPECT_NEAR(CostOf(empty, pod, NodePolicy::kBinpack), -0.25, 1e-9);  // (0.5 + 0.5) / 2 dims / 2 cards
  EXPECT_NEAR(CostOf(busy, pod, NodePolicy::kBinpack), -0.75, 1e-9);
  EXPECT_NEAR(CostOf(empty, pod, NodePolicy::kSpread), 0.25, 1e-9);
  EXPECT_NEAR(CostOf(busy, pod, NodePolicy::kSpread), 0.75, 1e-9);
}

TEST(Allocator, ExtenderScoresRankCostsSoTheBestStaysBest) {
  EXPECT_EQ(ExtenderScores({}), std::vector<int>{});
  EXPECT_EQ(ExtenderScores({0.5}), std::vector<int>{10});
  // Costs a hair apart still rank apart; equal costs share a score.
  EXPECT_EQ(ExtenderScores({0.30001, 0.3, 0.9, 0.3}), (std::vector<int>{9, 10, 8, 10}));
  std::vector<double> many;
  for (int i = 0; i < 15; ++i) many.push_back(i);
  const std::vector<int> scores = ExtenderScores(many);
  EXPECT_EQ(scores.front(), 10);
  EXPECT_EQ(scores[10], 0);
  EXPECT_EQ(scores.back(), 0);
  // In any order, with repeats: the score is 10 less the number of distinct lower costs (at least 0).
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<double> costs(rng() % 40);
    for (double& c : costs) c = static_cast<double>(rng() % 25) / 4;
    const std::vector<int> got = ExtenderScores(costs);
    ASSERT_EQ(got.size(), costs.size());
    for (size_t i = 0; i < costs.size(); ++i) {
      std::set<double> lower;
      for (double c : costs)
        if (c < costs[i]) lower.insert(c);
      EXPECT_EQ(got[i], std::max(0, 10 - static_cast<int>(lower.size())));
    }
  }
}

TEST(Decide, AFittingNodeCarriesItsPlacementCost) {
  const NodeState node = Node("n", 2, 24576);
  PodRequest pod = Online("a", 30, 1024);
  pod.node_policy = NodePolicy::kSpread;
  Placement scratch;
  const NodeDecision d = Decide(node, pod, nullptr, true, scratch);
  EXPECT_TRUE(d.fits);
  EXPECT_EQ(d.cost, CostOf(node, pod, NodePolicy::kSpread));
  EXPECT_TRUE(d.reason.empty());
}

// The reason is the one kube-scheduler shows (SchedulerReason of the failed placement); ChooseCards fails
// on the node too, with its detailed sentence.
TEST(Decide, ANodeThatDoesNotFitGivesTheSchedulersReason) {
  NodeState node = Node("n", 2, 24576);
  ASSERT_TRUE(ChooseAndApply(node, Online("a", 80, 1024)).error.empty());
  ASSERT_TRUE(ChooseAndApply(node, Online("b", 80, 1024)).error.empty());
  Placement scratch;
  for (const PodRequest& pod : {Online("c", 30, 1024), Online("d", 100, 1024, 2), Online("e", 100, 1024)}) {
    const NodeDecision d = Decide(node, pod, nullptr, true, scratch);
    EXPECT_FALSE(d.fits);
    Placement failed;
    ASSERT_FALSE(Place(node, pod, nullptr, failed));
    EXPECT_EQ(d.reason, SchedulerReason(node, pod, failed));
    EXPECT_FALSE(ChooseCards(node, pod).ok());
    EXPECT_TRUE(Decide(node, pod, nullptr, false, scratch).reason.empty());
  }
}

TEST(Scores, RanksTheFittingNodesAsTheExtenderDoesAndGivesTheOthersZero) {
  std::vector<NodeDecision> decisions(4);
  decisions[0] = {true, -0.5, ""};
  decisions[1] = {false, 0, "full"};
  decisions[2] = {true, -0.9, ""};
  decisions[3] = {true, -0.5, ""};
  const std::vector<int> scores = Scores(decisions);
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_EQ(scores[2], 10);
  EXPECT_EQ(scores[0], 9);
  EXPECT_EQ(scores[3], 9);
  EXPECT_EQ(scores[1], 0);
}

}  // namespace
}  // namespace mgpu
