// mgpu_guard_sim: the compute rules on the simulated card (sim_card.h), the scenarios of issue 26 printed as
// a table: each tenant's share of the card and the card's idle time, and how soon a share settles after a
// start or a neighbour's exit. Usage: mgpu_guard_sim [--one-process-per-sample | --one-process-at-the-end]
// [--seconds N] [--period-ms N] (NVML's sample period: 1/6 s by default; 200 on an H200 with driver 580)
// [--warmup-ms N] (each process warms up this long before the common start, as in a GPU run) [--seeds N]
// (shares: the mean over seeds 1..N). Each share is the card time the process held and, in brackets, what
// NVML's samples show (the GPU run's judge).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "guard/testing/sim_card.h"

using namespace mgpu::guard;
using namespace mgpu::guard::sim;

namespace {

const char* PolicyName(SharePolicy p) {
  return p == SharePolicy::kFixedShare             ? "fixed-share"
         : p == SharePolicy::kGuaranteedBurstShare ? "guaranteed-burst-share"
                                                   : "native-burst-share";
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  uint64_t warmup_ms = 0;
  int seeds = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--one-process-per-sample")) config.naming = Config::Naming::kOneInProportion;
    if (!strcmp(argv[i], "--one-process-at-the-end")) config.naming = Config::Naming::kOneAtTheEnd;
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      config.duration_ms = 1000 * strtoull(argv[++i], nullptr, 10);
    if (!strcmp(argv[i], "--period-ms") && i + 1 < argc)
      config.sample_period_us = 1000 * strtoull(argv[++i], nullptr, 10);
    if (!strcmp(argv[i], "--warmup-ms") && i + 1 < argc) warmup_ms = strtoull(argv[++i], nullptr, 10);
    if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
    if (!strcmp(argv[i], "--jitter-ms") && i + 1 < argc)
      config.stamp_jitter_us = 1000 * strtoull(argv[++i], nullptr, 10);
  }
  printf(
      "NVML model: %s, a period of %.1f ms; %llu s per run, measured from 2 s after the start%s; mean of "
      "%d seed(s)\n",
      config.naming == Config::Naming::kEveryProcess ? "a sample per process per period"
      : config.naming == Config::Naming::kOneInProportion
          ? "one process per period, in proportion to its time"
          : "one process per period, the one at its end",
      static_cast<double>(config.sample_period_us) / 1000,
      static_cast<unsigned long long>(config.duration_ms / 1000), warmup_ms ? ", after a warm-up" : "",
      seeds);
  const std::vector<std::vector<uint32_t>> sets = {{30}, {30, 70}, {20, 30, 50}, {10, 90}};
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    for (const auto& shares : sets) {
      std::vector<Tenant> tenants;
      for (uint32_t s : shares) {
        Tenant t{s, policy};
        t.start_ms = warmup_ms;
        t.warmup_ms = warmup_ms;
        tenants.push_back(t);
      }
      const uint64_t from = warmup_ms + 2000, to = warmup_ms + config.duration_ms;
      std::vector<double> held(shares.size()), judged(shares.size());
      double idle = 0;
      for (int seed = 1; seed <= seeds; ++seed) {
        Config c = config;
        c.duration_ms = to + 1000;  // so that the samples cover the window's end
        c.seed = static_cast<uint64_t>(seed);
        const Result r = Simulate(c, tenants);
        for (size_t t = 0; t < shares.size(); ++t) {
          held[t] += r.Share(static_cast<int>(t), from, to) / seeds;
          judged[t] += r.JudgedShare(static_cast<int>(t), from, to) / seeds;
        }
        idle += r.Idle(from, to) / seeds;
      }
      std::string line;
      for (size_t t = 0; t < shares.size(); ++t) {
        char cell[64];
        snprintf(cell, sizeof(cell), "%s%u->%.1f (%.1f)", t ? " " : "", shares[t], held[t], judged[t]);
        line += cell;
      }
      printf("%-24s %-46s idle %5.1f\n", PolicyName(policy), line.c_str(), idle);
    }
  }
  // Settling: a 30 percent container starts at 3 s beside a running 70; the 70 exits at 6 s. How long until
  // every 1 s window's share is within 2 points.
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    Config c = config;
    c.duration_ms = 10'000;
    const Result r = Simulate(
        c, {Tenant{70, policy, QosLevel::kOnline, 0, 6000}, Tenant{30, policy, QosLevel::kOnline, 3000}});
    const double alone = policy == SharePolicy::kFixedShare ? 30 : 100;
    const auto ms = [](uint64_t v) { return v == UINT64_MAX ? -1LL : static_cast<long long>(v); };
    printf(
        "%-24s settled (1 s windows within 2 points; -1: never) after a start: 30 in %lld ms, 70 in %lld ms; "
        "after the 70's exit: 30 at %.0f in %lld ms\n",
        PolicyName(policy), ms(r.SettledAfter(1, 3000, 6000, 30, 2, 1000)),
        ms(r.SettledAfter(0, 3000, 6000, 70, 2, 1000)), alone,
        ms(r.SettledAfter(1, 6000, 10'000, alone, 2, 1000)));
  }
  return 0;
}
