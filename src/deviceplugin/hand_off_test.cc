#include "deviceplugin/hand_off.h"

#include <gtest/gtest.h>

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using Strings = std::vector<std::string>;
using Clock = HandOffLedger::Clock;

PendingContainer Container(const std::string& pod, const std::string& uuid) {
  return PendingContainer{"default/" + pod, "main", {CardShare{uuid, 20, 0, 2048}}, 1, "uid-" + pod};
}

TEST(HandOffLedgerTest, AnAllocateFindsTheContainerItsIdsWerePreferredFor) {
  HandOffLedger ledger;
  ledger.Matched(Resource::kCore, {"GPU-a-c1", "GPU-a-c0"}, Container("p", "GPU-a"));
  ledger.Matched(Resource::kMemory, {"GPU-a-m0"}, Container("p", "GPU-a"));
  // Another resource's IDs, or other IDs, match nothing.
  EXPECT_FALSE(ledger.Allocated(Resource::kMemory, {"GPU-a-c0", "GPU-a-c1"}, {"GPU-a"}, 0, {}).matched);
  const HandOffLedger::Allocation a =
      ledger.Allocated(Resource::kCore, {"GPU-a-c0", "GPU-a-c1"}, {"GPU-a"}, 0, {});
  ASSERT_TRUE(a.matched);
  EXPECT_EQ(a.matched->pod, "default/p");
  // Taken: the same IDs again match nothing.
  EXPECT_FALSE(ledger.Allocated(Resource::kCore, {"GPU-a-c0", "GPU-a-c1"}, {"GPU-a"}, 0, {}).matched);
  // A refused Allocate takes its preference too.
  ASSERT_TRUE(ledger.Refused(Resource::kMemory, {"GPU-a-m0"}));
  EXPECT_FALSE(ledger.Refused(Resource::kMemory, {"GPU-a-m0"}));
}

TEST(HandOffLedgerTest, OnlyTheLatestPreferencesAreKept) {
  HandOffLedger ledger;
  for (size_t i = 0; i <= HandOffLedger::kMaxMatches; ++i)
    ledger.Matched(Resource::kCore, {"GPU-a-c" + std::to_string(i)},
                   Container("p" + std::to_string(i), "GPU-a"));
  EXPECT_FALSE(ledger.Refused(Resource::kCore, {"GPU-a-c0"}));  // the oldest, dropped
  EXPECT_TRUE(ledger.Refused(Resource::kCore, {"GPU-a-c1"}));
}

// A hand-out counts until an answer to a PodResources request started a whole poll after it.
TEST(HandOffLedgerTest, AHandOutCountsUntilAnAnswerRequestedAPollAfterIt) {
  HandOffLedger ledger;
  ledger.Matched(Resource::kCore, {"GPU-a-c0"}, Container("p", "GPU-a"));
  ledger.Allocated(Resource::kCore, {"GPU-a-c0"}, {"GPU-a"}, /*requests_started=*/7, {});
  const HandedOut key{"uid-p", "main", Resource::kCore};
  EXPECT_EQ(ledger.Unsettled(7), (HandedOutCards{{key, CardSet{"GPU-a"}}}));  // in flight at the hand-out
  EXPECT_EQ(ledger.Unsettled(8).size(), 1u);  // started after it, but may race the kubelet's recording
  EXPECT_TRUE(ledger.Unsettled(9).empty());   // a poll later: the answer shows the truth
  EXPECT_TRUE(ledger.Unsettled(0).empty());   // and the hand-out is forgotten
}

TEST(HandOffLedgerTest, ADeletedPodsHandOutsAreForgotten) {
  HandOffLedger ledger;
  for (const char* pod : {"p", "q"}) {
    ledger.Matched(Resource::kCore, {std::string("GPU-") + pod + "-c0"},
                   Container(pod, std::string("GPU-") + pod));
    ledger.Allocated(Resource::kCore, {std::string("GPU-") + pod + "-c0"}, {std::string("GPU-") + pod}, 0,
                     {});
  }
  ledger.Forget("uid-p");
  const HandedOutCards left = ledger.Unsettled(0);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left.begin()->first.pod_uid, "uid-q");
}

TEST(HandOffLedgerTest, TheLatestAllocateHintsTheSameContainersOtherResource) {
  HandOffLedger ledger;
  const Clock::time_point t0{};
  EXPECT_TRUE(ledger.JustAllocated(Resource::kMemory, t0).empty());  // nothing allocated yet
  EXPECT_FALSE(ledger.Allocated(Resource::kCore, {}, {"GPU-b"}, 0, t0).split);
  EXPECT_TRUE(
      ledger.JustAllocated(Resource::kCore, t0 + 1s).empty());  // the same resource: another container
  EXPECT_EQ(ledger.JustAllocated(Resource::kMemory, t0 + 1s), Strings{"GPU-b"});
}

TEST(HandOffLedgerTest, TheHintLastsTenSeconds) {
  HandOffLedger ledger;
  const Clock::time_point t0{};
  ledger.Allocated(Resource::kCore, {}, {"GPU-a"}, 0, t0);
  EXPECT_EQ(ledger.JustAllocated(Resource::kMemory, t0 + 10s), Strings{"GPU-a"});
  EXPECT_TRUE(ledger.JustAllocated(Resource::kMemory, t0 + 10s + 1ms).empty());
}

TEST(HandOffLedgerTest, TheAllocateCompletingAPairClearsTheHintAndSaysWhetherTheCardsAgree) {
  HandOffLedger ledger;
  const Clock::time_point t0{};
  ledger.Allocated(Resource::kCore, {}, {"GPU-a"}, 0, t0);
  ASSERT_FALSE(ledger.JustAllocated(Resource::kMemory, t0).empty());
  EXPECT_FALSE(ledger.Allocated(Resource::kMemory, {}, {"GPU-a"}, 0, t0).split);
  EXPECT_TRUE(ledger.JustAllocated(Resource::kMemory, t0).empty());  // the pair is complete
  EXPECT_TRUE(ledger.JustAllocated(Resource::kCore, t0).empty());

  ledger.Allocated(Resource::kCore, {}, {"GPU-a"}, 0, t0);
  ASSERT_FALSE(ledger.JustAllocated(Resource::kMemory, t0).empty());
  EXPECT_TRUE(ledger.Allocated(Resource::kMemory, {}, {"GPU-b"}, 0, t0).split);  // split over two cards
  EXPECT_TRUE(ledger.JustAllocated(Resource::kMemory, t0).empty());
}

TEST(HandOffLedgerTest, AnAllocateNobodyWasHintedStartsANewHint) {
  HandOffLedger ledger;
  const Clock::time_point t0{};
  ledger.Allocated(Resource::kCore, {}, {"GPU-a"}, 0, t0);
  EXPECT_FALSE(ledger.Allocated(Resource::kCore, {}, {"GPU-b"}, 0, t0 + 1s).split);  // the next container
  EXPECT_EQ(ledger.JustAllocated(Resource::kMemory, t0 + 1s), Strings{"GPU-b"});
}

// The locked owner reads the PodResources request count before it records the hand-out.
TEST(HandOffTest, RecordsTheRequestsStartedBeforeTheHandOut) {
  uint64_t started = 3;
  HandOff hand_off([&] { return started; });
  hand_off.Matched(Resource::kMemory, {"GPU-a-m0"}, Container("p", "GPU-a"));
  ASSERT_TRUE(hand_off.Allocated(Resource::kMemory, {"GPU-a-m0"}, {"GPU-a"}, Clock::now()).matched);
  started = 10;
  EXPECT_EQ(hand_off.Unsettled(4).size(), 1u);
  EXPECT_TRUE(hand_off.Unsettled(5).empty());
}

}  // namespace
}  // namespace mgpu::dp
