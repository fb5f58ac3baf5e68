// The compute rules (budget.h) on a card state in memory: no processes, no clock, no NVML.
#include "guard/budget.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace mgpu::guard {
namespace {

constexpr uint64_t kMs = 1'000'000;  // ns

UtilSample S(uint32_t pid, uint64_t stamp_us, uint32_t sm_percent) {
  UtilSample s{};
  s.pid = pid;
  s.timeStamp = stamp_us;
  s.smUtil = sm_percent;
  return s;
}

class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = std::make_unique<StateFile>();
    InitState(*f_, "GPU-test");
  }

  // Adds a container with one process of pid `pid`; returns its record index.
  uint32_t Add(uint32_t pid, uint32_t share, SharePolicy policy, QosLevel qos = QosLevel::kOnline) {
    const uint32_t i = next_++;
    ContainerRecord& r = f_->containers[i];
    r.in_use = 1;
    snprintf(r.token, sizeof(r.token), "c%u", i);
    r.qos = static_cast<uint32_t>(qos);
    r.policy = static_cast<uint32_t>(policy);
    r.share_percent = share;
    r.credit = StartingCredit(share);
    ProcessSlot& p = f_->processes[i];
    p.in_use = 1;
    p.container = i;
    p.pid = static_cast<int32_t>(pid);
    return i;
  }
  ContainerRecord& R(uint32_t i) { return f_->containers[i]; }
  void Launched(uint32_t i) { ++R(i).launches; }

  std::unique_ptr<StateFile> f_;
  uint32_t next_ = 0;
};

TEST_F(BudgetTest, AContainerStartsWithAFullBurstOfItsShare) {
  EXPECT_EQ(StartingCredit(30), 30 * kBurstUs);
  EXPECT_EQ(StartingCredit(0), 0);
}

TEST_F(BudgetTest, FixedShareGainsItsShareAndPaysWhatItUsed) {
  const uint32_t a = Add(10, 30, SharePolicy::kFixedShare);
  R(a).credit = 0;
  R(a).last_launch_ns = 1000 * kMs;  // its process runs
  // First refill: a period's gain (20 ms of 30 percent), nothing measured.
  EXPECT_EQ(Refill(*f_, nullptr, 0, 1000 * kMs), RefillOutcome::kNeverMeasured);
  EXPECT_EQ(R(a).credit, 30 * 20'000);
  // 100 ms later, NVML shows the process busy at 80 percent over the 100 ms since the last sample it gave.
  f_->header.nvml_last_seen_us = 5'000'000;
  f_->header.nvml_last_stamp_us = 5'000'000;
  UtilSample s[] = {S(10, 5'100'000, 80)};
  EXPECT_EQ(Refill(*f_, s, 1, 1100 * kMs), RefillOutcome::kMeasured);
  EXPECT_EQ(R(a).credit, 30 * 20'000 + 30 * 100'000 - 80 * 100'000);
  EXPECT_EQ(R(a).util_percent, 80u);
  EXPECT_EQ(f_->header.card_util_percent, 80u);
  EXPECT_EQ(f_->header.nvml_last_seen_us, 5'100'000u);
  EXPECT_EQ(f_->header.nvml_last_stamp_us, 5'100'000u);
  EXPECT_EQ(f_->header.last_refill_ns, 1100 * kMs);
}

TEST_F(BudgetTest, ARefillIsDueOncePerPeriodAndNotBeforeALaterStamp) {
  f_->header.last_refill_ns = 1000 * kMs;
  EXPECT_FALSE(RefillDue(*f_, 1000 * kMs + kRefillNs - 1));
  EXPECT_TRUE(RefillDue(*f_, 1000 * kMs + kRefillNs));
  EXPECT_FALSE(RefillDue(*f_, 990 * kMs));  // another process refilled after this one read its clock
}

TEST_F(BudgetTest, DebtStopsAtASecondOfTheWholeCard) {
  const uint32_t a = Add(10, 10, SharePolicy::kFixedShare);
  f_->header.last_refill_ns = 1000 * kMs;
  f_->header.nvml_last_seen_us = 1'000'000;
  f_->header.nvml_last_stamp_us = 1'000'000;
  // Ten sample periods of the whole card (1.7 s), against a 10 percent share.
  UtilSample s[10];
  for (int i = 0; i < 10; ++i) s[i] = S(10, 1'000'000 + (i + 1) * kDefaultSamplePeriodUs, 100);
  Refill(*f_, s, 10, 1020 * kMs);
  EXPECT_EQ(R(a).credit, kMostDebt);
}

TEST_F(BudgetTest, ASampleAfterAGapIsChargedForOnePeriodOnly) {
  const uint32_t a = Add(10, 10, SharePolicy::kFixedShare);
  R(a).credit = 0;
  f_->header.last_refill_ns = 1000 * kMs;
  f_->header.nvml_last_seen_us = 1'000'000;
  f_->header.nvml_last_stamp_us = 1'000'000;
  // Idle for two seconds (no samples: NVML names no idle process), then one busy period.
  UtilSample s[] = {S(10, 3'000'000, 100)};
  Refill(*f_, s, 1, 1020 * kMs);
  EXPECT_EQ(R(a).credit, 10 * 20'000 - 100 * static_cast<int64_t>(kDefaultSamplePeriodUs));
  // Once the card's period is known (200 ms, an H200's), a gap is charged for that period.
  R(a).credit = 0;
  UtilSample t[] = {S(10, 3'200'000, 100), S(10, 3'400'000, 100), S(10, 5'000'000, 100)};
  Refill(*f_, t, 3, 1040 * kMs);
  EXPECT_EQ(f_->header.nvml_period_us, 200'000u);
  EXPECT_EQ(R(a).credit, 10 * 20'000 - 100 * 3 * 200'000);
}

TEST_F(BudgetTest, ASampleStandsForTheCardsOwnPeriodLearnedFromItsStamps) {
  // A card that samples every 200 ms (an H200 with driver 580), its one process busy all the time: each
  // sample is a whole period of the card, not the 1/6 s of other cards (which held a 30 to 35).
  const uint32_t a = Add(10, 30, SharePolicy::kFixedShare);
  R(a).credit = 0;
  f_->header.last_refill_ns = 1000 * kMs;
  for (uint64_t i = 1; i <= 5; ++i) {
    UtilSample s[] = {S(10, 1'000'000 + i * 200'000, 100)};
    Refill(*f_, s, 1, (1000 + 20 * i) * kMs);
  }
  EXPECT_EQ(f_->header.nvml_period_us, 200'000u);
  // The first sample (no earlier stamp) stood for the time since the last refill; the four after it for
  // their 200 ms.
  EXPECT_EQ(R(a).credit, 5 * 30 * 20'000 - 100 * 20'000 - 4 * 100 * 200'000);
}

TEST_F(BudgetTest, ThePeriodIsTheShortestSpacingThatCanBeOne) {
  UtilSample s[] = {S(1, 1'000'000, 50), S(2, 1'000'000, 50), S(1, 1'400'000, 50),
                    S(1, 1'600'000, 50), S(1, 1'650'000, 50), S(1, 3'650'000, 50)};
  EXPECT_EQ(LearnPeriod(0, 0, s, 6), 200'000u);  // not 0 (one stamp), 50 ms or 2 s: no NVML period
  EXPECT_EQ(LearnPeriod(0, 0, s, 3), 400'000u);  // two idle periods between: the best known yet
  EXPECT_EQ(LearnPeriod(150'000, 0, s, 6), 150'000u);
  EXPECT_EQ(LearnPeriod(0, 800'000, s, 1), 200'000u);  // from the last stamp charged before
  EXPECT_EQ(LearnPeriod(0, 0, s, 0), 0u);
}

TEST_F(BudgetTest, WhileItRunsTheCreditHoldsItsBurstNVMLsLagAndOnePeriodOfTheCard) {
  const uint32_t small = Add(10, 30, SharePolicy::kFixedShare);
  const uint32_t big = Add(11, 80, SharePolicy::kFixedShare);
  R(small).waiting = 1;  // both run (a launch waits), and NVML charges nothing for 100 s
  R(big).waiting = 1;
  for (uint64_t t = 1; t <= 100; ++t) Refill(*f_, nullptr, 0, t * 1000 * kMs);
  // Where the driver names one process per period, a process is charged the whole card's period at once,
  // after the periods that named others: its credit holds their gains as well as its burst and NVML's lag.
  const int64_t period_of_card = 100 * static_cast<int64_t>(kDefaultSamplePeriodUs);
  EXPECT_EQ(R(small).credit, 30 * (kBurstUs + kSampleLagUs) + period_of_card);
  EXPECT_EQ(R(big).credit, 80 * (kBurstUs + kSampleLagUs) + period_of_card);
}

TEST_F(BudgetTest, AnIdleContainerKeepsItsBurstAndRunsAgainWithNoMore) {
  const uint32_t a = Add(10, 30, SharePolicy::kFixedShare);
  for (uint64_t t = 1; t <= 100; ++t) Refill(*f_, nullptr, 0, t * 1000 * kMs);  // idle for 100 s
  EXPECT_EQ(R(a).credit, StartingCredit(30));
  // It launches again a second after the last refill: the second's gain is not saved either.
  R(a).last_launch_ns = 101'000 * kMs;
  Refill(*f_, nullptr, 0, 101'000 * kMs);
  EXPECT_EQ(R(a).credit, StartingCredit(30));
  Refill(*f_, nullptr, 0, 101'020 * kMs);  // running at its share: it gains again
  EXPECT_EQ(R(a).credit, StartingCredit(30) + 30 * 20'000);
}

TEST_F(BudgetTest, ABursterKeepsNothingOfTheIdleCardOnceTheOthersWantTheirShares) {
  const uint32_t burst = Add(10, 30, SharePolicy::kGuaranteedBurstShare);
  const uint32_t other = Add(11, 70, SharePolicy::kFixedShare);
  f_->header.last_refill_ns = 1000 * kMs;
  f_->header.nvml_last_seen_us = 1'000'000;
  f_->header.nvml_last_stamp_us = 1'000'000;
  // Alone on the card, the burster gains all of it and uses all of it; its credit holds what it saved.
  R(burst).last_launch_ns = 1000 * kMs;
  R(burst).credit = 20'000'000;
  UtilSample s[] = {S(10, 1'020'000, 100)};
  Refill(*f_, s, 1, 1020 * kMs);
  EXPECT_EQ(R(burst).credit, 20'000'000);
  // The other container launches: the burster is back at its share and keeps its 100 ms burst and what
  // pays for the 20 ms of its use at 100 percent that NVML has not reported yet.
  Launched(other);
  R(other).last_launch_ns = 1030 * kMs;
  Refill(*f_, nullptr, 0, 1040 * kMs);
  EXPECT_EQ(R(burst).credit, StartingCredit(30) + 100 * 20'000);
  // That use is charged; then it gains its share as before.
  Launched(other);
  UtilSample t[] = {S(10, 1'040'000, 100)};
  Refill(*f_, t, 1, 1060 * kMs);
  EXPECT_EQ(R(burst).credit, StartingCredit(30) + 30 * 20'000);
}

TEST_F(BudgetTest, NativeBurstShareIsNotHeldToAShare) {
  const uint32_t native = Add(10, 30, SharePolicy::kNativeBurstShare);
  R(native).credit = -5;
  f_->header.nvml_last_seen_us = 1'000'000;
  UtilSample s[] = {S(10, 1'100'000, 50)};
  Refill(*f_, s, 1, 1000 * kMs);
  EXPECT_EQ(R(native).credit, -5);
  EXPECT_EQ(R(native).util_percent, 50u);  // measured all the same, for /metrics
}

TEST_F(BudgetTest, OfflineIsHeldToItsReclaimedPercentAndGainsNothingWhileOnlineRuns) {
  const uint32_t offline = Add(11, 40, SharePolicy::kNativeBurstShare, QosLevel::kOffline);
  R(offline).credit = 0;
  R(offline).release_ns = 100 * kMs;
  R(offline).last_launch_ns = 1000 * kMs;
  f_->header.last_refill_ns = 1000 * kMs;
  Refill(*f_, nullptr, 0, 1020 * kMs);
  EXPECT_EQ(R(offline).credit, 40 * 20'000);  // its percent, whatever its policy
  f_->header.online_last_launch_ns = 1030 * kMs;
  R(offline).waiting = 1;
  R(offline).credit = 10'000'000;  // what it had saved
  Refill(*f_, nullptr, 0, 1040 * kMs);
  // Held back by online work: nothing gained, and no more kept than one refill's gain, so that its first
  // launch after the release goes at once.
  EXPECT_EQ(R(offline).credit, 40 * 20'000);
  R(offline).credit = -5;  // a late charge of its last run is still owed
  Refill(*f_, nullptr, 0, 1060 * kMs);
  EXPECT_EQ(R(offline).credit, -5);
  Refill(*f_, nullptr, 0, 1140 * kMs);
  EXPECT_EQ(R(offline).credit, -5 + 40 * 80'000);  // released, it gains its percent again
}

TEST_F(BudgetTest, WhoIsHeldToAShare) {
  Settings s;
  s.share_percent = 30;
  for (SharePolicy p : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    s.policy = p;
    EXPECT_TRUE(HeldToShare(s));
  }
  s.policy = SharePolicy::kNativeBurstShare;
  EXPECT_FALSE(HeldToShare(s));
  s.qos = QosLevel::kOffline;
  EXPECT_TRUE(HeldToShare(s));  // MGPU_RECLAIMED_CORE_PERCENT holds offline work
  s.share_percent = 0;
  EXPECT_FALSE(HeldToShare(s));  // no percent: no share
}

TEST_F(BudgetTest, ALaunchWaitsForOnlineWorkThenForItsShare) {
  const uint32_t off = Add(11, 40, SharePolicy::kFixedShare, QosLevel::kOffline);
  Settings s;
  s.qos = QosLevel::kOffline;
  s.share_percent = 40;
  s.release_ns = 100 * kMs;
  R(off).credit = 0;
  f_->header.online_last_launch_ns = 1000 * kMs;
  EXPECT_EQ(LaunchHold(*f_, R(off), s, true, 1050 * kMs), Hold::kOnline);
  EXPECT_EQ(LaunchHold(*f_, R(off), s, true, 1100 * kMs), Hold::kShare);
  EXPECT_EQ(LaunchHold(*f_, R(off), s, false, 1100 * kMs), Hold::kNone);  // its use cannot be measured
  R(off).credit = 1;
  EXPECT_EQ(LaunchHold(*f_, R(off), s, true, 1100 * kMs), Hold::kNone);
}

TEST_F(BudgetTest, StampsFromAnotherClockHoldNothing) {
  const uint64_t now = 1000 * kMs;
  const uint64_t hour = 3600'000 * kMs;
  EXPECT_EQ(OfflineWaitNs(now + hour, now, 100 * kMs), 0u);  // not an hour and 100 ms
  f_->header.last_refill_ns = now + hour;
  EXPECT_TRUE(RefillDue(*f_, now));  // or no budget would refill for an hour
  const uint32_t a = Add(10, 30, SharePolicy::kFixedShare);
  R(a).credit = 0;
  Refill(*f_, nullptr, 0, now);
  EXPECT_EQ(R(a).credit, 30 * 20'000);  // counted as one period
  EXPECT_EQ(f_->header.last_refill_ns, now);
  // NVML's clock (realtime) set back an hour: ask from now on, or nothing newer would come for an hour.
  f_->header.nvml_last_seen_us = 5'000'000'000 + 3600'000'000ULL;
  EXPECT_EQ(SamplesSince(*f_, 5'000'000'000), 5'000'000'000u);
  f_->header.nvml_last_seen_us = 4'999'000'000;
  EXPECT_EQ(SamplesSince(*f_, 5'000'000'000), 4'999'000'000u);
}

TEST_F(BudgetTest, GuaranteedBurstShareGainsWhatTheOthersLeaveIdle) {
  const uint32_t burst = Add(10, 30, SharePolicy::kGuaranteedBurstShare);
  const uint32_t fixed = Add(11, 20, SharePolicy::kFixedShare);
  R(burst).credit = 0;
  R(fixed).credit = 0;
  f_->header.last_refill_ns = 1000 * kMs;
  f_->header.nvml_last_seen_us = 1'000'000;
  f_->header.nvml_last_stamp_us = 1'000'000;
  // The fixed container used 10 percent and still wants to run: it claims its share, 20; the burster may
  // gain the other 80.
  Launched(fixed);
  Launched(burst);
  UtilSample s[] = {S(10, 1'020'000, 60), S(11, 1'020'000, 10)};
  Refill(*f_, s, 2, 1020 * kMs);
  EXPECT_EQ(R(burst).credit, 80 * 20'000 - 60 * 20'000);
  EXPECT_EQ(R(fixed).credit, 20 * 20'000 - 10 * 20'000);
  // A process no container owns (another tenant of the card) takes its measured use out of what is idle.
  R(burst).credit = 0;
  Launched(fixed);
  UtilSample t[] = {S(10, 1'040'000, 30), S(11, 1'040'000, 10), S(99, 1'040'000, 60)};
  Refill(*f_, t, 3, 1040 * kMs);
  EXPECT_EQ(R(burst).credit, 30 * 20'000 - 30 * 20'000 * 100 / 100);  // left = 100 - 20 - 60 = 20 < share 30
}

TEST_F(BudgetTest, AnIdleNeighbourClaimsOnlyWhatItUsed) {
  const uint32_t burst = Add(10, 30, SharePolicy::kGuaranteedBurstShare);
  const uint32_t idle = Add(11, 50, SharePolicy::kFixedShare);
  R(burst).credit = 0;
  f_->header.last_refill_ns = 1000 * kMs;
  f_->header.nvml_last_seen_us = 1'000'000;
  f_->header.nvml_last_stamp_us = 1'000'000;
  Launched(burst);  // the other launched nothing and waits for nothing
  UtilSample s[] = {S(10, 1'020'000, 100)};
  Refill(*f_, s, 1, 1020 * kMs);
  EXPECT_EQ(R(burst).credit, 0);  // gained the whole card, used the whole card
  EXPECT_EQ(R(idle).util_percent, 0u);
}

TEST_F(BudgetTest, EachSampleIsChargedForItsWindowAndGroupsAreScaledToTheCard) {
  const uint32_t a = Add(10, 50, SharePolicy::kFixedShare);
  const uint32_t b = Add(11, 50, SharePolicy::kFixedShare);
  // The driver names one process per window, alternating: each is charged for the windows it held.
  UtilSample s[] = {S(10, 1'100'000, 100), S(11, 1'250'000, 100), S(10, 1'400'000, 100)};
  Usage u;
  ASSERT_TRUE(ChargeSamples(*f_, s, 3, 1'000'000, 20'000, kDefaultSamplePeriodUs, u));
  EXPECT_EQ(u.busy[a], 100 * (100'000 + 150'000));
  EXPECT_EQ(u.busy[b], 100 * 150'000);
  EXPECT_EQ(u.util[a], 62u);
  EXPECT_EQ(u.total, 100u);
  EXPECT_EQ(u.newest_us, 1'400'000u);
  // Two samples at one stamp adding up to 150 share their window, scaled to the card: 60 and 40.
  UtilSample g[] = {S(10, 2'000'000, 90), S(11, 2'000'000, 60)};
  ASSERT_TRUE(ChargeSamples(*f_, g, 2, 1'900'000, 20'000, kDefaultSamplePeriodUs, u));
  EXPECT_EQ(u.util[a], 60u);
  EXPECT_EQ(u.util[b], 40u);
  EXPECT_FALSE(ChargeSamples(*f_, g, 0, 0, 20'000, kDefaultSamplePeriodUs, u));
}

TEST_F(BudgetTest, WithNoGuardedPidTheCardsUseIsSplitByLaunches) {
  const uint32_t a = Add(10, 50, SharePolicy::kFixedShare);
  const uint32_t b = Add(11, 50, SharePolicy::kFixedShare);
  R(a).launches = 30;
  R(b).launches = 10;
  UtilSample s[] = {S(4242, 1'100'000, 80)};  // a host pid the containers' namespaces do not show
  Usage u;
  ASSERT_TRUE(ChargeSamples(*f_, s, 1, 1'000'000, 20'000, kDefaultSamplePeriodUs, u));
  EXPECT_EQ(u.util[a], 60u);
  EXPECT_EQ(u.util[b], 20u);
}

TEST_F(BudgetTest, WithoutNewSamplesTheLastRatesStandForHalfASecond) {
  const uint32_t a = Add(10, 30, SharePolicy::kFixedShare);
  UtilSample s[] = {S(10, 1'000'000, 70)};
  EXPECT_EQ(Refill(*f_, s, 1, 1100 * kMs), RefillOutcome::kMeasured);
  EXPECT_EQ(Refill(*f_, nullptr, 0, 1200 * kMs), RefillOutcome::kKept);
  EXPECT_EQ(R(a).util_percent, 70u);
  EXPECT_EQ(Refill(*f_, nullptr, 0, 1700 * kMs), RefillOutcome::kIdle);
  EXPECT_EQ(R(a).util_percent, 0u);
}

TEST_F(BudgetTest, UntilTheFirstSampleTheCardIsNeverMeasured) {
  Add(10, 30, SharePolicy::kFixedShare);
  EXPECT_EQ(Refill(*f_, nullptr, 0, 1000 * kMs), RefillOutcome::kNeverMeasured);
  EXPECT_EQ(Refill(*f_, nullptr, 0, 1100 * kMs), RefillOutcome::kNeverMeasured);
  UtilSample s[] = {S(10, 1'000'000, 70)};
  EXPECT_EQ(Refill(*f_, s, 1, 1200 * kMs), RefillOutcome::kMeasured);
}

TEST_F(BudgetTest, OfflineWaitsUntilOnlineHasBeenIdleForTheReleaseWindow) {
  EXPECT_EQ(OfflineWaitNs(0, 5000 * kMs, 100 * kMs), 0u);  // no online launch ever
  EXPECT_EQ(OfflineWaitNs(5000 * kMs, 5040 * kMs, 100 * kMs), 60 * kMs);
  EXPECT_EQ(OfflineWaitNs(5000 * kMs, 5100 * kMs, 100 * kMs), 0u);
  EXPECT_EQ(OfflineWaitNs(5000 * kMs, 4990 * kMs, 100 * kMs), 110 * kMs);  // stamped after `now` was read
  EXPECT_EQ(OfflineWaitNs(5000 * kMs, 5005 * kMs, 10 * kMs), 5 * kMs);
}

TEST_F(BudgetTest, OnlyOnlineLaunchesStampTheCardAndTheStampNeverGoesBack) {
  const uint32_t on = Add(10, 30, SharePolicy::kFixedShare);
  const uint32_t off = Add(11, 30, SharePolicy::kFixedShare, QosLevel::kOffline);
  NoteLaunch(*f_, R(off), QosLevel::kOffline, 100);
  EXPECT_EQ(f_->header.online_last_launch_ns, 0u);
  NoteLaunch(*f_, R(on), QosLevel::kOnline, 200);
  NoteLaunch(*f_, R(on), QosLevel::kOnline, 150);  // another process read its clock earlier
  EXPECT_EQ(f_->header.online_last_launch_ns, 200u);
  EXPECT_EQ(R(on).launches, 2u);
  EXPECT_EQ(R(on).last_launch_ns, 150u);
  EXPECT_EQ(R(off).launches, 1u);
}

}  // namespace
}  // namespace mgpu::guard
