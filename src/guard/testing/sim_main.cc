// mgpu_guard_sim: the compute rules on the simulated card (sim_card.h), the scenarios of issue 26 printed as
// a table: each tenant's share of the card and the card's idle time, and how soon a share settles after a
// start or a neighbour's exit. Usage: mgpu_guard_sim [--one-process-per-sample] [--seconds N]
// [--period-ms N] (NVML's sample period: 1/6 s by default; 200 on an H200 with driver 580)
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
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--one-process-per-sample")) config.one_process_per_sample = true;
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      config.duration_ms = 1000 * strtoull(argv[++i], nullptr, 10);
    if (!strcmp(argv[i], "--period-ms") && i + 1 < argc)
      config.sample_period_us = 1000 * strtoull(argv[++i], nullptr, 10);
  }
  printf("NVML model: %s, a period of %.1f ms; %llu s per run, measured from 2 s on\n",
         config.one_process_per_sample ? "one process per sample period" : "a sample per process per period",
         static_cast<double>(config.sample_period_us) / 1000,
         static_cast<unsigned long long>(config.duration_ms / 1000));
  const std::vector<std::vector<uint32_t>> sets = {{30}, {30, 70}, {20, 30, 50}, {10, 90}};
  for (SharePolicy policy : {SharePolicy::kFixedShare, SharePolicy::kGuaranteedBurstShare}) {
    for (const auto& shares : sets) {
      std::vector<Tenant> tenants;
      for (uint32_t s : shares) tenants.push_back(Tenant{s, policy});
      const Result r = Simulate(config, tenants);
      std::string line;
      for (size_t t = 0; t < shares.size(); ++t) {
        char cell[64];
        snprintf(cell, sizeof(cell), "%s%u->%.1f", t ? " " : "", shares[t],
                 r.Share(static_cast<int>(t), 2000, config.duration_ms));
        line += cell;
      }
      printf("%-24s %-28s idle %5.1f\n", PolicyName(policy), line.c_str(), r.Idle(2000, config.duration_ms));
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
