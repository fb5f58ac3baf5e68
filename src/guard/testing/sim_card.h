// A simulated card for the guard's compute rules (budget.h), so that shares, idle time and convergence are
// tested deterministically, in milliseconds of CPU, with no GPU and no clock.
//
// A fake, and why: what the rules decide depends on timing (NVML's sample period and lag, the card's
// time-slicing, a launch's wait) that neither the fake driver nor a test's wall clock can reproduce exactly.
// So time is simulated: each tenant is one container with one process running a compute-bound loop (launch
// `kernels_per_sync` kernels of `kernel_us` of card time each, wait for them, again), the card time-slices
// evenly among the processes with queued work, and NVML reports each sample period's per-process use a
// little later. Every launch passes the guard's rules as compute.cc does: the budgets refilled when due from
// the samples readable by then (Refill), the launch held while LaunchHold says so, re-checked every
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
};

struct Config {
  uint64_t duration_ms = 10'000;
  uint64_t step_us = 100;
  uint64_t kernel_us = 1'600;  // a bf16 8192^3 product on an H100
  int kernels_per_sync = 2;
  uint64_t sample_period_us = 166'667;  // NVML's, on current drivers
  uint64_t report_delay_us = 10'000;    // a sample is readable this long after its stamp
  // The driver names one process per sample period (the one on the card at its end, drawn in proportion to
  // the time each held), with the card's whole use, as seen on an H100; else one sample per process.
  bool one_process_per_sample = false;
  uint64_t seed = 1;
  uint64_t release_ns = kDefaultReleaseNs;
};

struct Result {
  uint64_t bin_ms = 100;
  std::vector<std::vector<double>> used;  // per tenant, per bin: the fraction of the card it held
  std::vector<uint64_t> throttled;        // per tenant: launches that waited for the share
  std::vector<uint64_t> held_back;        // per tenant: launches that waited for online work

  // Percent of the card tenant `t` held over [from_ms, to_ms).
  double Share(int t, uint64_t from_ms, uint64_t to_ms) const;
  // Percent of the card no tenant held over [from_ms, to_ms).
  double Idle(uint64_t from_ms, uint64_t to_ms) const;
  // How long after `from_ms` tenant `t`'s share over every `window_ms` window (sliding by a bin) that ends by
  // `to_ms` stays within `tolerance` points of `target` (UINT64_MAX: never).
  uint64_t SettledAfter(int t, uint64_t from_ms, uint64_t to_ms, double target, double tolerance,
                        uint64_t window_ms) const;
};

Result Simulate(const Config& config, const std::vector<Tenant>& tenants);

}  // namespace mgpu::guard::sim
