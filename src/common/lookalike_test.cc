#include "common/lookalike.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <random>

namespace mgpu {
namespace {

PoolMember Waiting(CardSet assigned, int64_t age) { return PoolMember{std::move(assigned), std::nullopt, age}; }
PoolMember Holding(CardSet assigned, CardSet holding, int64_t age) {
  return PoolMember{std::move(assigned), std::move(holding), age};
}

TEST(LookAlike, KeyCoversTheWholeShape) {
  PodRequest pod;
  ContainerRequest c{"a", false, 20, 0, 4096, 1};
  const std::string base = LookAlikeKey(pod, c);
  ContainerRequest renamed = c;
  renamed.name = "b";
  EXPECT_EQ(LookAlikeKey(pod, renamed), base);  // names do not matter
  for (ContainerRequest other : {ContainerRequest{"a", false, 30, 0, 4096, 1},
                                 ContainerRequest{"a", false, 20, 0, 2048, 1},
                                 ContainerRequest{"a", false, 20, 20, 4096, 1},
                                 ContainerRequest{"a", false, 40, 0, 8192, 2}})
    EXPECT_NE(LookAlikeKey(pod, other), base);
  PodRequest burst = pod;
  burst.compute_policy = ComputePolicy::kGuaranteedBurstShare;
  EXPECT_NE(LookAlikeKey(burst, c), base);
  PodRequest offline = pod;
  offline.qos = Qos::kOffline;
  EXPECT_NE(LookAlikeKey(offline, c), base);
  PodRequest dedicated = pod;
  dedicated.dedicated = true;
  EXPECT_NE(LookAlikeKey(dedicated, c), base);
}

TEST(LookAlike, WaitingMembersHoldTheirOwnCards) {
  const auto held = HoldFromPool({Waiting({"g1"}, 1), Waiting({"g2"}, 2)});
  EXPECT_EQ(held[0], CardSet{"g1"});
  EXPECT_EQ(held[1], CardSet{"g2"});
}

TEST(LookAlike, SwapMovesTheElderToTheYoungersCards) {
  // The kubelet admitted the younger first and the plugin gave it the elder's card g1.
  const auto held = HoldFromPool({Waiting({"g1"}, 1), Holding({"g2"}, {"g1"}, 2)});
  EXPECT_EQ(held[0], CardSet{"g2"});
  EXPECT_EQ(held[1], CardSet{"g1"});
}

TEST(LookAlike, ConfirmationsInEitherOrderCountEachCardOnce) {
  // Elder confirmed on the younger's card, younger still waiting: it holds the elder's card.
  EXPECT_EQ(HoldFromPool({Holding({"g1"}, {"g2"}, 1), Waiting({"g2"}, 2)})[1], CardSet{"g1"});
  // Both confirmed, swapped.
  const auto both = HoldFromPool({Holding({"g1"}, {"g2"}, 1), Holding({"g2"}, {"g1"}, 2)});
  EXPECT_EQ(both[0], CardSet{"g2"});
  EXPECT_EQ(both[1], CardSet{"g1"});
}

TEST(LookAlike, OutsideThePoolIsCountedWhereItIsAndNothingTwice) {
  // The younger really got g9 (no pool card): it is counted there; the elder keeps one item only.
  const auto held = HoldFromPool({Waiting({"g1"}, 1), Holding({"g2"}, {"g9"}, 2)});
  EXPECT_EQ(held[0], CardSet{"g1"});
  EXPECT_EQ(held[1], CardSet{"g9"});
}

TEST(LookAlike, MultiCardItemsMoveWhole) {
  const auto held = HoldFromPool({Waiting({"g1", "g2"}, 1), Holding({"g3", "g4"}, {"g1", "g2"}, 2)});
  EXPECT_EQ(held[0], (CardSet{"g3", "g4"}));
}

// Any order of admissions, each taking an item the pool offers: the counted multiset is always A.
TEST(LookAlike, CountedItemsAreAlwaysTheAssignedMultiset) {
  std::mt19937 rng(7);
  for (int round = 0; round < 500; ++round) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<PoolMember> members;
    std::multiset<CardSet> assigned;
    for (int i = 0; i < n; ++i) {
      CardSet cards{"g" + std::to_string(rng() % 3)};
      members.push_back(Waiting(cards, static_cast<int64_t>(rng() % 4)));
      assigned.insert(cards);
    }
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int admitted : order) {
      // The kubelet admits `admitted`; the plugin offers some waiting member's pooled item.
      auto held = HoldFromPool(members);
      std::vector<CardSet> offers;
      for (int i = 0; i < n; ++i)
        if (!members[i].holding && held[i]) offers.push_back(*held[i]);
      ASSERT_FALSE(offers.empty());
      members[admitted].holding = offers[rng() % offers.size()];
      held = HoldFromPool(members);
      std::multiset<CardSet> counted;
      for (const auto& h : held) {
        ASSERT_TRUE(h.has_value());
        counted.insert(*h);
      }
      EXPECT_EQ(counted, assigned);
    }
  }
}

// Both ends group a node's containers through one loop: each pool is HoldFromPool's, answered per container
// in the order given, and a container of unknown shape is a pool of its own.
TEST(LookAlike, PoolsAreGroupedByKeyAndAnsweredInTheOrderGiven) {
  const std::vector<PoolEntry> entries = {
      {"shape-a", Waiting({"g1"}, 1)},
      {UnreadablePool("uid-x", "main"), Waiting({"g2"}, 0)},
      {"shape-a", Holding({"g2"}, {"g1"}, 2)},
      {"shape-b", Waiting({"g2"}, 3)},
  };
  const std::vector<std::optional<CardSet>> held = HoldFromPools(entries);
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(held[0], CardSet{"g2"});  // its look-alike took g1: it holds what the pool has left
  EXPECT_EQ(held[1], CardSet{"g2"});  // alone in its pool: its own
  EXPECT_EQ(held[2], CardSet{"g1"});
  EXPECT_EQ(held[3], CardSet{"g2"});
  EXPECT_NE(UnreadablePool("uid-x", "main"), UnreadablePool("uid-y", "main"));
  EXPECT_TRUE(HoldFromPools({}).empty());
}

}  // namespace
}  // namespace mgpu
