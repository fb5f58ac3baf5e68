#include "deviceplugin/allocation.h"

#include <gtest/gtest.h>

#include <list>
#include <string_view>

namespace mgpu::dp {
namespace {

using Ids = std::vector<std::string>;

std::vector<Card> Cards(int n, int64_t memory_mib = 8) {
  std::vector<Card> cards;
  for (int i = 0; i < n; ++i) cards.push_back(Card{i, "GPU-" + std::to_string(i), "A10", memory_mib, true});
  return cards;
}

// Every device of `resource` on `cards` but the first `taken[card]` ordinals, as views (PreferredRequest
// borrows its IDs, as the plugin borrows them from the kubelet's request) into IDs kept for the whole run.
std::vector<std::string_view> Available(const std::vector<Card>& cards, Resource resource,
                                        const Config& config,
                                        const std::map<std::string, int64_t>& taken = {}) {
  static std::list<Ids> kept;
  Ids& ids = kept.emplace_back();
  for (const Card& c : cards) {
    auto it = taken.find(c.uuid);
    for (int64_t k = it == taken.end() ? 0 : it->second; k < DevicesPerCard(c, resource, config); ++k)
      ids.push_back(DeviceId(c.uuid, resource, k));
  }
  return {ids.begin(), ids.end()};
}

PendingContainer Pending(std::string pod, std::vector<CardShare> cards, int64_t assume) {
  return PendingContainer{std::move(pod), "main", std::move(cards), assume};
}

TEST(ChoosePreferred, AnswersTheCandidateWhoseSizeMatches) {
  Config config;
  const auto cards = Cards(2);
  PreferredRequest r{Available(cards, Resource::kCore, config), {}, 30};
  std::vector<PendingContainer> pending = {Pending("ns/big", {{"GPU-0", 50, 0, 4}}, 1),
                                           Pending("ns/small", {{"GPU-1", 30, 0, 2}}, 2)};
  auto p = ChoosePreferred(Resource::kCore, r, pending, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->pod, "ns/small");
  ASSERT_EQ(p->device_ids.size(), 30u);
  EXPECT_EQ(p->device_ids.front(), "GPU-1-c0");
  EXPECT_EQ(p->device_ids.back(), "GPU-1-c29");
}

TEST(ChoosePreferred, PrefersTheContainerJustGivenItsOtherResourceThenTheOldest) {
  Config config;
  const auto cards = Cards(3);
  PreferredRequest r{Available(cards, Resource::kMemory, config), {}, 2};
  std::vector<PendingContainer> pending = {Pending("ns/newer", {{"GPU-2", 10, 0, 2}}, 300),
                                           Pending("ns/oldest", {{"GPU-0", 10, 0, 2}}, 100),
                                           Pending("ns/middle", {{"GPU-1", 10, 0, 2}}, 200)};
  auto oldest = ChoosePreferred(Resource::kMemory, r, pending, {}, cards, config);
  ASSERT_TRUE(oldest.ok()) << oldest.message();
  EXPECT_EQ(oldest->pod, "ns/oldest");
  EXPECT_EQ(oldest->device_ids, (Ids{"GPU-0-m0", "GPU-0-m1"}));
  auto paired = ChoosePreferred(Resource::kMemory, r, pending, {"GPU-2"}, cards, config);
  ASSERT_TRUE(paired.ok()) << paired.message();
  EXPECT_EQ(paired->pod, "ns/newer");
}

TEST(ChoosePreferred, SkipsCandidatesWhoseCardsLackFreeDevices) {
  Config config;
  const auto cards = Cards(2);
  PreferredRequest r{Available(cards, Resource::kCore, config, {{"GPU-0", 80}}), {}, 30};
  std::vector<PendingContainer> pending = {Pending("ns/a", {{"GPU-0", 30, 0, 1}}, 1),
                                           Pending("ns/b", {{"GPU-1", 30, 0, 1}}, 2)};
  auto p = ChoosePreferred(Resource::kCore, r, pending, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->pod, "ns/b");
}

TEST(ChoosePreferred, MultiCardCandidateGetsItsShareOnEachCard) {
  Config config;
  config.memory_unit_mib = 2;
  const auto cards = Cards(3);
  PreferredRequest r{Available(cards, Resource::kMemory, config), {}, 4};
  std::vector<PendingContainer> pending = {Pending("ns/wide", {{"GPU-0", 50, 0, 4}, {"GPU-2", 50, 0, 4}}, 1)};
  auto p = ChoosePreferred(Resource::kMemory, r, pending, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->device_ids, (Ids{"GPU-0-m0", "GPU-0-m1", "GPU-2-m0", "GPU-2-m1"}));
}

TEST(ChoosePreferred, MustIncludeIdsComeFirst) {
  Config config;
  const auto cards = Cards(1);
  PreferredRequest r{Available(cards, Resource::kCore, config), {"GPU-0-c7"}, 2};
  auto p = ChoosePreferred(Resource::kCore, r, {Pending("ns/a", {{"GPU-0", 2, 0, 1}}, 1)}, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->device_ids, (Ids{"GPU-0-c7", "GPU-0-c0"}));
}

TEST(ChoosePreferred, MustIncludeIdsElsewhereRuleACandidateOutAndCountOnce) {
  Config config;
  const auto cards = Cards(2);
  // The kubelet insists on a device of card 1 that is also listed as available: only "ns/b" can take it.
  PreferredRequest r{Available(cards, Resource::kCore, config), {"GPU-1-c5", "GPU-1-c5"}, 3};
  std::vector<PendingContainer> pending = {Pending("ns/a", {{"GPU-0", 3, 0, 1}}, 1),
                                           Pending("ns/b", {{"GPU-1", 3, 0, 1}}, 2)};
  auto p = ChoosePreferred(Resource::kCore, r, pending, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->pod, "ns/b");
  EXPECT_EQ(p->device_ids, (Ids{"GPU-1-c5", "GPU-1-c0", "GPU-1-c1"}));
  // A must-include ID the available list lacks still counts among the card's devices.
  PreferredRequest tight{{"GPU-1-c0", "GPU-1-c1"}, {"GPU-1-c9"}, 3};
  auto q = ChoosePreferred(Resource::kCore, tight, pending, {}, cards, config);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->device_ids, (Ids{"GPU-1-c9", "GPU-1-c0", "GPU-1-c1"}));
}

TEST(ChoosePreferred, WithoutCandidatesTheAllocatorBinpacksOnFreeDevices) {
  Config config;
  const auto cards = Cards(3);
  // Card 1 is the fullest card that still fits 30.
  PreferredRequest r{Available(cards, Resource::kCore, config, {{"GPU-0", 90}, {"GPU-1", 60}}), {}, 30};
  auto p = ChoosePreferred(Resource::kCore, r, {}, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->pod.empty());
  ASSERT_EQ(p->device_ids.size(), 30u);
  EXPECT_EQ(p->device_ids.front(), "GPU-1-c60");

  config.default_card_policy = CardPolicy::kSpread;
  auto spread = ChoosePreferred(Resource::kCore, r, {}, {}, cards, config);
  ASSERT_TRUE(spread.ok()) << spread.message();
  EXPECT_EQ(spread->device_ids.front(), "GPU-2-c0");
}

TEST(ChoosePreferred, WithoutCandidatesTheOtherResourcesCardsComeFirst) {
  Config config;
  const auto cards = Cards(3);
  PreferredRequest r{Available(cards, Resource::kMemory, config), {}, 3};
  auto p = ChoosePreferred(Resource::kMemory, r, {}, {"GPU-2"}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->device_ids, (Ids{"GPU-2-m0", "GPU-2-m1", "GPU-2-m2"}));
}

TEST(ChoosePreferred, WithoutCandidatesSpreadsWholeCardsOverSeveralCards) {
  Config config;
  const auto cards = Cards(3);
  PreferredRequest r{Available(cards, Resource::kCore, config, {{"GPU-1", 1}}), {}, 200};
  auto p = ChoosePreferred(Resource::kCore, r, {}, {}, cards, config);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->device_ids.front(), "GPU-0-c0");
  EXPECT_EQ(p->device_ids.back(), "GPU-2-c99");
}

TEST(ChoosePreferred, FailsWithAReasonWhenNothingFits) {
  Config config;
  const auto cards = Cards(2);
  PreferredRequest r{Available(cards, Resource::kMemory, config, {{"GPU-0", 4}, {"GPU-1", 4}}), {}, 5};
  auto p = ChoosePreferred(Resource::kMemory, r, {}, {}, cards, config);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("no card can take"), std::string::npos) << p.message();

  PreferredRequest odd{Available(cards, Resource::kCore, config), {}, 150};
  auto q = ChoosePreferred(Resource::kCore, odd, {}, {}, cards, config);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.message().find("multiple of 100"), std::string::npos) << q.message();
}

TEST(ChoosePreferred, RejectsIdsOfUnknownCardsOrOtherResources) {
  Config config;
  const auto cards = Cards(1);
  PreferredRequest unknown{{"GPU-9-c0"}, {}, 1};
  auto p = ChoosePreferred(Resource::kCore, unknown, {}, {}, cards, config);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("which this node does not have"), std::string::npos) << p.message();
  PreferredRequest other{{"GPU-0-m0"}, {}, 1};
  EXPECT_FALSE(ChoosePreferred(Resource::kCore, other, {}, {}, cards, config).ok());
}

TEST(ReadAllocation, ReadsCardsAndAmountPerCard) {
  Config config;
  config.memory_unit_mib = 256;
  auto cards = Cards(3, 8192);
  auto a = ReadAllocation(Resource::kMemory, {"GPU-2-m0", "GPU-0-m3", "GPU-2-m1", "GPU-0-m4"}, cards, config);
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_EQ(a->cards.size(), 2u);
  EXPECT_EQ(a->cards[0].uuid, "GPU-0");
  EXPECT_EQ(a->cards[1].uuid, "GPU-2");
  EXPECT_EQ(a->per_card, 512);
}

TEST(ReadAllocation, RefusesEveryInconsistency) {
  Config config;
  auto cards = Cards(2);
  cards[1].healthy = false;
  const std::vector<std::pair<Ids, std::string>> cases = {
      {{}, "no mgpu-core devices"},
      {{"GPU-7-c0"}, "which this node does not have"},
      {{"GPU-1-c0"}, "unhealthy"},
      {{"GPU-0-c0", "GPU-0-c0"}, "asked for twice"},
      {{"GPU-0-m0"}, "is a mgpu-memory device"},
      {{"GPU-0-c100"}, "beyond the 100"},
      {{"nonsense"}, "is not <card uuid>"},
  };
  for (const auto& [ids, why] : cases) {
    auto a = ReadAllocation(Resource::kCore, ids, cards, config);
    ASSERT_FALSE(a.ok()) << why;
    EXPECT_NE(a.message().find(why), std::string::npos) << a.message();
  }
  cards[1].healthy = true;
  auto uneven = ReadAllocation(Resource::kCore, {"GPU-0-c0", "GPU-0-c1", "GPU-1-c0"}, cards, config);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.message().find("equal share"), std::string::npos) << uneven.message();
}

}  // namespace
}  // namespace mgpu::dp
