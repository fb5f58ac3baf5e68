// The guard's compute rules as plain arithmetic over one card's shared state (state.h): how NVML's samples
// are charged to containers, how the budgets refill (the share, the debt a container may owe, the burst it
// may save, what guaranteed-burst-share may take of idle compute) and what holds a launch (the share; online
// work, for an offline container). No I/O, no clock, no lock, no allocation: the caller passes the time and
// holds the card lock where a function says so. compute.cc is the edge that reads NVML and the clock and
// sleeps; the unit tests and the simulated card (testing/sim_card.h) call these directly.
#pragma once

#include <atomic>
#include <cstdint>

#include "guard/cuda_api.h"
#include "guard/settings.h"
#include "guard/state.h"

namespace mgpu::guard {

inline constexpr uint64_t kRefillNs = 20'000'000;       // budgets are refilled at most this often
inline constexpr int64_t kBurstUs = 100'000;            // a full budget: the share for this long
inline constexpr uint64_t kMaxRefillGapUs = 1'000'000;  // a refill counts for at most this long
// NVML samples each card's use once per period, "between 1 second and 1/6 second depending on the product"
// (200 ms on an H200 with driver 580): the guard learns a card's from the spacing of its stamps.
inline constexpr uint64_t kDefaultSamplePeriodUs = 166'667;  // until the card's own is learned
inline constexpr uint64_t kShortestPeriodUs = 100'000;       // spacings outside these are not a period
inline constexpr uint64_t kLongestPeriodUs = 1'000'000;
inline constexpr uint64_t kStaleSampleNs = 500'000'000;  // no new samples for this long (or 3 periods): idle
inline constexpr int64_t kSampleLagUs = 250'000;  // NVML reports use this late (or 1.5 periods), at most
inline constexpr int64_t kMostDebt = -100 * 1'000'000;   // percent x microseconds: a second of the card
inline constexpr uint64_t kClockJumpNs = 1'000'000'000;  // a stamp this far ahead comes from another clock

// True when `stamp_ns`, written by some process, is too far past `now_ns` to be a later reading of the same
// clock (a clock that jumped, another time namespace, a damaged file): the rules then treat it as absent, so
// that no launch waits for a moment that will not come.
inline bool FromAnotherClock(uint64_t stamp_ns, uint64_t now_ns) { return stamp_ns > now_ns + kClockJumpNs; }

// One of NVML's per-process utilisation samples, as NVML gives them: pid, timeStamp (CLOCK_REALTIME
// microseconds) and smUtil are read.
using UtilSample = nvmlProcessUtilizationSample_t;

// The use one batch of new samples shows.
struct Usage {
  int64_t busy[kMaxContainers] = {};   // percent x microseconds to charge each container
  uint32_t util[kMaxContainers] = {};  // each container's percent of the time the samples cover
  uint32_t total = 0;                  // the card's percent
  uint64_t newest_us = 0;              // the newest sample's stamp
};

// Charges `count` new samples (sorted here by stamp) to the containers of `f`, matched to its process slots
// by pid. A sample stands for the window since the previous sample's stamp (`previous_us` for the first), or
// for one sample period (`period_us`) when the spacing is over one and a half periods (a process idle for a
// period has no sample, so a gap is not its use); with no earlier stamp known (`previous_us` 0), for
// `first_window_us`, at most a period: when processes time-share the card, the driver reports one process
// per window, so a process is charged for the windows it held. Samples at one stamp share its window, scaled
// to the card when they add up to more. When no sample's pid is a guarded process's (a pid namespace hides
// host pids from the driver), the card's total is split by the launches each container made since the last
// refill. False, and `out` untouched, when there are no samples.
bool ChargeSamples(const StateFile& f, UtilSample* samples, unsigned count, uint64_t previous_us,
                   uint64_t first_window_us, uint64_t period_us, Usage& out);

// NVML's sample period on a card, learned: the shortest spacing between consecutive stamps (from
// `previous_us`, 0: none, through `count` samples sorted by stamp) that can be a period (kShortestPeriodUs to
// kLongestPeriodUs), or `period_us` (0: not yet learned) when none is shorter. A spacing of several periods
// (a card idle for a while) never lowers it below a real one, and jitter only matters after a gap.
uint64_t LearnPeriod(uint64_t period_us, uint64_t previous_us, const UtilSample* samples, unsigned count);

// The sample period the rules use on card `f`: the learned one, else kDefaultSamplePeriodUs.
inline uint64_t SamplePeriodUs(const StateFile& f) {
  return f.header.nvml_period_us ? f.header.nvml_period_us : kDefaultSamplePeriodUs;
}

// True when card `f`'s budgets are due for a refill at `now_ns` (CLOCK_MONOTONIC). Lock-free; ask again
// under the card lock before refilling. Another process may have refilled after `now_ns` was read: a later
// stamp means not due, unless it is from another clock.
inline bool RefillDue(const StateFile& f, uint64_t now_ns) {
  const uint64_t last = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(f.header.last_refill_ns)).load();
  return last + kRefillNs <= now_ns || FromAnotherClock(last, now_ns);
}

// The stamp to ask NVML for samples after, at `now_real_us` (CLOCK_REALTIME, NVML's clock): the newest
// sample seen, or now when that is from another clock (the realtime clock was set back), since NVML would
// answer nothing newer until the clock caught up.
inline uint64_t SamplesSince(const StateFile& f, uint64_t now_real_us) {
  const uint64_t seen = f.header.nvml_last_seen_us;
  return FromAnotherClock(seen * 1000, now_real_us * 1000) ? now_real_us : seen;
}

// Whether container `r` wants its card's budgets refilled at `now_ns`: it launched within the longest refill
// gap or has a launch waiting. A process's NVML reader refills only then.
inline bool RefillWanted(const ContainerRecord& r, uint64_t now_ns) {
  return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(r.waiting)).load() > 0 ||
         std::atomic_ref<uint64_t>(const_cast<uint64_t&>(r.last_launch_ns)).load() + kMaxRefillGapUs * 1000 >
             now_ns;
}

enum class RefillOutcome {
  kMeasured,       // new samples were charged
  kKept,           // none new, but the last rates are recent enough to stand
  kIdle,           // none new for a while: no process ran on the card
  kNeverMeasured,  // NVML has never reported a sample on this card
};

// Refills every container's budget on card `f` at `now_ns`: each held to a share gains it
// (guaranteed-burst-share also what the other containers leave idle) and is charged what `samples` (NVML's
// new ones, maybe none; sorted here) show it used. While it runs, its credit holds at most its share over a
// burst and NVML's lag plus one sample period of the whole card; idle, its burst (StartingCredit); what it
// saved beyond its burst while idle, held back, or using idle compute is dropped when it runs at its share
// again; it owes at most kMostDebt. Updates the records' rates, the card's stamps and its learned sample
// period. Under the card lock, when RefillDue.
RefillOutcome Refill(StateFile& f, UtilSample* samples, unsigned count, uint64_t now_ns);

// The budget a container record starts with: a full burst of its share.
inline int64_t StartingCredit(uint32_t share_percent) {
  return static_cast<int64_t>(share_percent) * kBurstUs;
}

// How long an offline launch at `now_ns` still waits for online work that last launched at
// `online_last_launch_ns` (0: it goes): until that launch is `release_ns` old (a launch stamped after
// `now_ns` was read waits the longer).
inline uint64_t OfflineWaitNs(uint64_t online_last_launch_ns, uint64_t now_ns, uint64_t release_ns) {
  if (online_last_launch_ns == 0 || online_last_launch_ns + release_ns <= now_ns ||
      FromAnotherClock(online_last_launch_ns, now_ns))
    return 0;
  return online_last_launch_ns + release_ns - now_ns;
}

// Whether a container with settings `s` is held to a compute share (so its launches refill the budgets):
// online under fixed-share or guaranteed-burst-share, offline whenever its reclaimed percent is set (as a
// fixed share: the guaranteed burst is online's).
bool HeldToShare(const Settings& s);

// What holds a launch of container `r` (settings `s`) at `now_ns`, in the order the launch meets them:
// online work on the card, for an offline container; then an empty budget, for a container held to a share
// whose use can be measured (`measured`). The launch asks again after kWaitStepNs (or sooner, to the end of
// the online hold: OfflineWaitNs), refilling the budgets first when they are due.
enum class Hold { kNone, kOnline, kShare };
Hold LaunchHold(const StateFile& f, const ContainerRecord& r, const Settings& s, bool measured,
                uint64_t now_ns);
inline constexpr uint64_t kWaitStepNs = 2'000'000;

// A launch of container `r` passed at `now_ns`: counts it and, for an online container, stamps the card's
// last online launch (never backwards). Lock-free.
inline void NoteLaunch(StateFile& f, ContainerRecord& r, QosLevel qos, uint64_t now_ns) {
  if (qos == QosLevel::kOnline) {
    std::atomic_ref<uint64_t> stamp(f.header.online_last_launch_ns);
    uint64_t seen = stamp.load();
    while (seen < now_ns && !stamp.compare_exchange_weak(seen, now_ns)) {
    }
  }
  std::atomic_ref<uint64_t>(r.launches).fetch_add(1);
  std::atomic_ref<uint64_t>(r.last_launch_ns).store(now_ns);
}

}  // namespace mgpu::guard
