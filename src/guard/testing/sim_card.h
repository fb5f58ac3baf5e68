// A simulated card for the guard's compute rules (budget.h), so that shares, idle time and convergence are
// tested deterministically, in milliseconds of CPU, with no GPU and no clock.
//
// A fake, and why: what the rules decide depends on timing (NVML's sample period and lag, the card's
// time-slicing, a launch's wait) that neither the fake driver nor a test's wall clock can reproduce exactly.
// So time is simulated: each tenant is one container with one process running a compute-bound loop (launch
// `kernels_per_sync` kernels of `kernel_us` of card time each, wait for them, again), the card time-slices
// evenly among the processes with queued work, and NVML reports each sample period's use a little later
// (per process, or naming one process per period: Config::naming). As in compute.cc, each process's NVML
// reader refills the budgets every kRefillNs while its container wants it (RefillWanted), from the samples
// readable by then (Refill), and every launch is held while LaunchHold says so, re-checked every
// kWaitStepNs.
#pragma once

#include <cstdint>
#include <vector>

#include "guard/budget.h"

namespace mgpu::guard::sim {

struct Tenant {
  uint32_t share = 0;  // MGPU_CORE_PERCENT, or MGPU_RECLAIMED_CORE_PERCENT offline
  SharePolicy policy = SharePolicy::kFixedShare;
  QosLevel qos = QosLevel::kOnline;
  uint64_t start_ms = 0;          // its process starts
  uint64_t stop_ms = UINT64_MAX;  // and exits
  uint64_t busy_ms = 0;           // with idle_ms: busy this long, then idle, in turn (0: always busy)
  uint64_t idle_ms = 0;
  // Its process starts this much earlier, launches one batch (a program's CUDA and library warm-up) and
  // waits for start_ms, as a GPU run's processes wait for a common start.
  uint64_t warmup_ms = 0;
};

struct Config {
  uint64_t duration_ms = 10'000;
  uint64_t step_us = 100;
  uint64_t kernel_us = 1'600;  // a bf16 8192^3 product on an H100
  int kernels_per_sync = 2;
  uint64_t sample_period_us = 166'667;  // NVML's, on current drivers
  uint64_t report_delay_us = 10'000;    // a sample is readable this long after its stamp
  uint64_t stamp_jitter_us = 0;  // each stamp falls this much either side of its period's end, at random
                                 // (run 2's H200: spacings of 200 ms, 1.8 ms standard deviation)
  // Whom NVML's samples name: each process with its own use; or one process per period with the card's whole
  // use, as an H100 and an H200 do, drawn in proportion to the time each held in the period, or the one on
  // the card at the period's end (an H200, driver 580: in run 2 of issue 26, the process named was the one
  // whose batch ran at the stamp in 71 % of the periods two shared, the one that held more in 52 %).
  enum class Naming { kEveryProcess, kOneInProportion, kOneAtTheEnd };
  Naming naming = Naming::kEveryProcess;
  uint64_t seed = 1;
  uint64_t release_ns = kDefaultReleaseNs;
};

struct Result {
  uint64_t bin_ms = 100;
  std::vector<std::vector<double>> used;  // per tenant, per bin: the fraction of the card it held
  std::vector<uint64_t> throttled;        // per tenant: launches that waited for the share
  std::vector<uint64_t> held_back;        // per tenant: launches that waited for online work
  struct Sample {
    uint64_t stamp_ms;  // the end of its period, from the start
    int tenant;         // the process it names
    uint32_t sm;        // its percent
  };
  uint64_t period_us = 0;
  std::vector<Sample> samples;  // every sample NVML gave, as an unguarded sampler reads them

  // Percent of the card tenant `t` held over [from_ms, to_ms).
  double Share(int t, uint64_t from_ms, uint64_t to_ms) const;
  // Percent of the card no tenant held over [from_ms, to_ms).
  double Idle(uint64_t from_ms, uint64_t to_ms) const;
  // Tenant `t`'s share of the card over [from_ms, to_ms) as the GPU run's judge reads it
  // (bench/gpu/guard_report.py): each sample naming it stands for its percent of the period before its stamp.
  double JudgedShare(int t, uint64_t from_ms, uint64_t to_ms) const;
  // How long after `from_ms` tenant `t`'s share over every `window_ms` window (sliding by a bin) that ends by
  // `to_ms` stays within `tolerance` points of `target` (UINT64_MAX: never).
  uint64_t SettledAfter(int t, uint64_t from_ms, uint64_t to_ms, double target, double tolerance,
                        uint64_t window_ms) const;
};

Result Simulate(const Config& config, const std::vector<Tenant>& tenants);

}  // namespace mgpu::guard::sim
