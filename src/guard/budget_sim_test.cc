// The compute rules on the simulated card (testing/sim_card.h): shares, idle time, settling and online over
// offline, deterministically. Figures for a real card are bench/gpu/guard_on_gpu.sh's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "guard/testing/sim_card.h"

namespace mgpu::guard::sim {
namespace {

constexpr double kPoints = 2;  // issue 26: within 2 points of the share
constexpr double kMostIdle = 3;

std::string Name(SharePolicy p) {
  return p == SharePolicy::kFixedShare ? "fixed-share" : "guaranteed-burst-share";
}

struct Case {
  std::vector<uint32_t> shares;
};

void ExpectShares(const Config& config, SharePolicy policy, const std::vector<uint32_t>& shares,
                  uint64_t from_ms, double points = kPoints) {
  std::vector<Tenant> tenants;
  uint32_t sum = 0;
  for (uint32_t s : shares) {
    tenants.push_back(Tenant{s, policy});
    sum += s;
  }
  const Result r = Simulate(config, tenants);
  for (size_t t = 0; t < shares.size(); ++t) {
    const double got = r.Share(static_cast<int>(t), from_ms, config.duration_ms);
    if (shares.size() == 1 && policy == SharePolicy::kGuaranteedBurstShare) {
      EXPECT_GT(got, 100 - kMostIdle) << Name(policy) << " alone uses the idle card";
    } else {
      EXPECT_NEAR(got, shares[t], points) << Name(policy) << " tenant " << t << " of " << shares.size();
    }
  }
  if (sum == 100) {
    EXPECT_LE(r.Idle(from_ms, config.duration_ms), kMostIdle) << Name(policy) << " " << shares.size();
  }
}

const std::vector<std::vector<uint32_t>> kSets = {{30}, {30, 70}, {20, 30, 50}, {10, 90}};

TEST(GuardSimulation, SharesHoldAloneInPairsAndTriplesWithSamplesPerProcess) {
  Config config;
  config.duration_ms = 10'000;
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare})
    for (const auto& shares : kSets) ExpectShares(config, policy, shares, 2000);
}

// Where the driver names one process per sample period (an H100), each period's use is charged to the one it
// names: right on average, noisy per period, so a share holds over minutes rather than seconds, and a
// guaranteed-burst-share triple only within 3 points (bench/RESULTS.md section 4).
TEST(GuardSimulation, SharesHoldOverMinutesWhenTheDriverNamesOneProcessPerSample) {
  Config config;
  config.duration_ms = 120'000;
  config.naming = Config::Naming::kOneInProportion;
  for (const auto& shares : kSets) ExpectShares(config, SharePolicy::kFixedShare, shares, 2000);
  for (const auto& shares : kSets) ExpectShares(config, SharePolicy::kGuaranteedBurstShare, shares, 2000, 3);
}

// A card whose NVML samples every 200 ms (an H200 with driver 580): the guard learns the period from the
// stamps, and each sample is charged for its whole period (a fixed 1/6 s held a 30 to 35 there).
TEST(GuardSimulation, SharesHoldOnACardThatSamplesEvery200Ms) {
  Config config;
  config.duration_ms = 10'000;
  config.sample_period_us = 200'000;
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare})
    for (const auto& shares : kSets) ExpectShares(config, policy, shares, 2000);
  const Result offline = Simulate(config, {Tenant{40, SharePolicy::kNativeBurstShare, QosLevel::kOffline}});
  EXPECT_NEAR(offline.Share(0, 2000, 10'000), 40, kPoints);
}

// What run 2 of issue 26 showed on an H200 (driver 580.159.04): a sample every 200 ms naming one process, the
// one whose work ran at the stamp, with the card's whole use; processes that warmed up, waited about 1.5 s
// and started together. The judge is the GPU run's: each share by the samples naming its process
// (JudgedShare).
Config H200(uint64_t seed, uint64_t duration_ms) {
  Config config;
  config.duration_ms = duration_ms;
  config.sample_period_us = 200'000;
  config.naming = Config::Naming::kOneAtTheEnd;
  config.stamp_jitter_us = 3000;
  config.seed = seed;
  return config;
}

std::vector<Tenant> StartingTogether(SharePolicy policy, const std::vector<uint32_t>& shares, QosLevel qos) {
  std::vector<Tenant> tenants;
  for (uint32_t s : shares) {
    Tenant t{s, policy, qos};
    t.start_ms = 2000;
    t.warmup_ms = 1500;
    tenants.push_back(t);
  }
  return tenants;
}

// With one process named per 200 ms, a share's credit must hold the gains of the periods that named others
// before the one that charges it a whole period: capped at the larger of its burst and one period of the card
// instead of their sum, the 50 of 20+30+50 lost its gains and held 47.9 on average.
TEST(GuardSimulation, SharesHoldOverTwentySecondsOnACardThatNamesOneProcessPer200Ms) {
  constexpr int kSeeds = 10;
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    for (const std::vector<uint32_t>& shares : {std::vector<uint32_t>{30, 70}, {20, 30, 50}, {10, 90}}) {
      std::vector<double> mean(shares.size(), 0);
      for (int seed = 1; seed <= kSeeds; ++seed) {
        const Result r = Simulate(H200(seed, 23'500), StartingTogether(policy, shares, QosLevel::kOnline));
        double judged_sum = 0;
        for (size_t t = 0; t < shares.size(); ++t) {
          const double judged = r.JudgedShare(static_cast<int>(t), 3000, 23'000);
          EXPECT_NEAR(judged, shares[t], 3) << Name(policy) << " seed " << seed << " tenant " << t;
          mean[t] += judged / kSeeds;
          judged_sum += judged;
        }
        EXPECT_GE(judged_sum, 100 - kMostIdle) << Name(policy) << " seed " << seed;
      }
      for (size_t t = 0; t < shares.size(); ++t)
        EXPECT_NEAR(mean[t], shares[t], 1) << Name(policy) << " tenant " << t << " of " << shares.size();
    }
  }
}

// A guaranteed-burst-share 30 uses the idle card alone; a 70 starts beside it. The 30 gives way as soon as
// NVML has reported what it used alone (a period later): what it saved while it used the idle card is not
// kept once the 70 wants its share (kept, a period of the whole card let the 30 hold the 70 to 57 percent of
// its first second).
TEST(GuardSimulation, AGuaranteedBursterGivesWayAsSoonAsANeighbourWantsItsShare) {
  constexpr int kSeeds = 20;
  double first_second = 0, after = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const Result r =
        Simulate(H200(seed, 9500), {Tenant{30, SharePolicy::kGuaranteedBurstShare},
                                    Tenant{70, SharePolicy::kGuaranteedBurstShare, QosLevel::kOnline, 3000}});
    EXPECT_GT(r.Share(0, 1000, 3000), 100 - kMostIdle) << "alone, the 30 uses the idle card; seed " << seed;
    first_second += r.Share(1, 3000, 4000) / kSeeds;
    after += r.JudgedShare(1, 4000, 9000) / kSeeds;
  }
  // A period of 200 ms at half the card instead of 70 percent costs the newcomer 4 points of that second.
  EXPECT_GE(first_second, 70 - 5) << "the newcomer's first second";
  EXPECT_NEAR(after, 70, kPoints) << "from 1 s after its start, by NVML's samples";
}

// A start after idle bursts no more than 100 ms of the share: judged as run 2 judged, over 4 s from 0.5 s
// after a common start, a fixed 10+90 and an offline 40 alone land within 2 points in most runs (saving a
// period of the whole card while idle, the 10 spent it at half the card in its first second).
TEST(GuardSimulation, AStartAfterIdleBurstsNoMoreThanTheShares100Ms) {
  constexpr int kSeeds = 50;
  int pairs_within = 0, offline_within = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const Result pair =
        Simulate(H200(seed, 7000), StartingTogether(SharePolicy::kFixedShare, {10, 90}, QosLevel::kOnline));
    pairs_within += std::abs(pair.JudgedShare(0, 2500, 6500) - 10) <= kPoints &&
                    std::abs(pair.JudgedShare(1, 2500, 6500) - 90) <= kPoints;
    const Result offline = Simulate(
        H200(seed, 7000), StartingTogether(SharePolicy::kNativeBurstShare, {40}, QosLevel::kOffline));
    offline_within += std::abs(offline.JudgedShare(0, 2500, 6500) - 40) <= kPoints;
  }
  EXPECT_GE(pairs_within, kSeeds * 7 / 10) << "of " << kSeeds;
  EXPECT_GE(offline_within, kSeeds * 9 / 10) << "of " << kSeeds;
}

TEST(GuardSimulation, ASharesSettlesWithinASecondOfAStartAndOfANeighboursExit) {
  Config config;
  config.duration_ms = 10'000;
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    // 70 runs alone, 30 starts at 3 s, 70 exits at 6 s.
    const Result r = Simulate(config, {Tenant{70, policy, QosLevel::kOnline, 0, 6000},
                                       Tenant{30, policy, QosLevel::kOnline, 3000}});
    EXPECT_NEAR(r.Share(1, 4000, 6000), 30, kPoints)
        << Name(policy) << ": the newcomer, from 1 s after its start";
    EXPECT_NEAR(r.Share(0, 4000, 6000), 70, kPoints)
        << Name(policy) << ": the neighbour, from 1 s after the start";
    EXPECT_LE(r.Idle(4000, 6000), kMostIdle) << Name(policy);
    const double alone = policy == SharePolicy::kFixedShare ? 30 : 100;
    EXPECT_NEAR(r.Share(1, 7000, 10'000), alone, policy == SharePolicy::kFixedShare ? kPoints : kMostIdle)
        << Name(policy) << ": from 1 s after the neighbour's exit";
  }
}

TEST(GuardSimulation, OfflineIsHeldToItsReclaimedPercentAndToNothingWhileOnlineRuns) {
  Config config;
  config.duration_ms = 10'000;
  // Alone: its reclaimed percent, whatever its policy.
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kNativeBurstShare}) {
    const Result alone = Simulate(config, {Tenant{40, policy, QosLevel::kOffline}});
    EXPECT_NEAR(alone.Share(0, 2000, 10'000), 40, kPoints) << Name(policy);
  }
  // Beside online work busy 1 s, idle 1 s: nothing while online runs, its percent while it idles.
  const Result r = Simulate(
      config, {Tenant{100, SharePolicy::kNativeBurstShare, QosLevel::kOnline, 0, UINT64_MAX, 1000, 1000},
               Tenant{40, SharePolicy::kFixedShare, QosLevel::kOffline}});
  double busy = 0, idle = 0;
  for (uint64_t t = 2000; t < 10'000; t += 2000) {
    busy += r.Share(1, t + 100, t + 1000) / 4;   // the kernel in flight when online starts finishes first
    idle += r.Share(1, t + 1200, t + 2000) / 4;  // released 100 ms after online's last launch
  }
  EXPECT_LT(busy, 1);
  EXPECT_NEAR(idle, 40, 2 * kPoints);  // a share refills over its first period after a hold
  EXPECT_GT(r.held_back[1], 0u);
  EXPECT_NEAR(r.Share(0, 2000, 10'000), 50, kPoints);  // online loses nothing: busy half the time
}

TEST(GuardSimulation, TheReleaseWindowIsTheConfiguredOne) {
  for (uint64_t release_ms : {10, 100}) {
    Config config;
    config.duration_ms = 4000;
    config.release_ns = release_ms * 1'000'000;
    const Result r =
        Simulate(config, {Tenant{100, SharePolicy::kNativeBurstShare, QosLevel::kOnline, 0, 2000},
                          Tenant{100, SharePolicy::kFixedShare, QosLevel::kOffline}});
    // Online's last launch is just before 2 s: offline holds the card from the release on.
    EXPECT_LT(r.Share(1, 1000, 2000), 1) << release_ms;
    const uint64_t back = 2000 + release_ms + 100;  // the 100 ms bin after the release
    EXPECT_GT(r.Share(1, back - back % 100 + 100, 3000), 95) << release_ms;
  }
}

}  // namespace
}  // namespace mgpu::guard::sim
