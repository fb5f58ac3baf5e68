#include "guard/budget.h"

#include <algorithm>
#include <atomic>

namespace mgpu::guard {
namespace {

template <typename T>
std::atomic_ref<T> A(T& field) {
  return std::atomic_ref<T>(field);
}
template <typename T>
T Load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load();
}

bool Offline(const ContainerRecord& r) { return r.qos == static_cast<uint32_t>(QosLevel::kOffline); }

// Whether a container's launches are held to its share by the budget: online under a policy that promises
// one, offline (reclaimed) always.
bool HeldToShare(const ContainerRecord& r) {
  return Offline(r) || r.policy != static_cast<uint32_t>(SharePolicy::kNativeBurstShare);
}

void SortByStamp(UtilSample* samples, unsigned count) {
  std::sort(samples, samples + count, [](const auto& a, const auto& b) { return a.timeStamp < b.timeStamp; });
}

}  // namespace

uint64_t LearnPeriod(uint64_t period_us, uint64_t previous_us, const UtilSample* samples, unsigned count) {
  for (unsigned i = 0; i < count; ++i) {
    const uint64_t stamp = samples[i].timeStamp;
    if (previous_us != 0 && stamp > previous_us) {
      const uint64_t spacing = stamp - previous_us;
      if (spacing >= kShortestPeriodUs && spacing <= kLongestPeriodUs &&
          (period_us == 0 || spacing < period_us))
        period_us = spacing;
    }
    previous_us = stamp;
  }
  return period_us;
}

bool ChargeSamples(const StateFile& f, UtilSample* samples, unsigned count, uint64_t previous_us,
                   uint64_t first_window_us, uint64_t period_us, Usage& out) {
  if (count == 0) return false;
  SortByStamp(samples, count);
  int64_t matched_busy[kMaxContainers] = {};
  int64_t all_busy = 0;
  uint64_t covered = 0;
  bool matched = false;
  uint64_t previous = previous_us;
  for (unsigned i = 0; i < count;) {
    const uint64_t stamp = samples[i].timeStamp;
    unsigned end = i;
    uint64_t group = 0;
    while (end < count && samples[end].timeStamp == stamp) group += samples[end++].smUtil;
    uint64_t window =
        previous == 0 || stamp <= previous ? std::min(first_window_us, period_us) : stamp - previous;
    if (window > period_us + period_us / 2) window = period_us;
    covered += window;
    for (; i < end; ++i) {
      const uint64_t card = group > 100 ? group : 100;  // a group adding up to more is scaled to the card
      const int64_t scaled = static_cast<int64_t>(uint64_t{samples[i].smUtil} * window * 100 / card);
      all_busy += scaled;
      for (const ProcessSlot& p : f.processes) {
        if (Load(p.in_use) && static_cast<uint32_t>(p.pid) == samples[i].pid &&
            p.container < kMaxContainers) {
          matched_busy[p.container] += scaled;
          matched = true;
        }
      }
    }
    previous = stamp;
  }
  if (covered == 0) covered = 1;
  out = Usage{};
  out.newest_us = previous;
  out.total = static_cast<uint32_t>(std::min<int64_t>(all_busy / static_cast<int64_t>(covered), 100));
  uint64_t launches = 0;
  uint64_t recent[kMaxContainers] = {};
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    const ContainerRecord& r = f.containers[i];
    recent[i] = Load(r.launches) - r.launches_at_refill;
    launches += recent[i];
  }
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    if (matched) {
      out.busy[i] = matched_busy[i];
    } else {
      out.busy[i] =
          launches ? all_busy * static_cast<int64_t>(recent[i]) / static_cast<int64_t>(launches) : 0;
    }
    const int64_t percent = out.busy[i] / static_cast<int64_t>(covered);
    out.util[i] = static_cast<uint32_t>(percent > 100 ? 100 : percent);
  }
  return true;
}

RefillOutcome Refill(StateFile& f, UtilSample* samples, unsigned count, uint64_t now_ns) {
  const uint64_t last = f.header.last_refill_ns;
  uint64_t dt_us = last == 0 || last > now_ns ? kRefillNs / 1000 : (now_ns - last) / 1000;
  if (dt_us > kMaxRefillGapUs) dt_us = kMaxRefillGapUs;
  SortByStamp(samples, count);
  const uint64_t learned = LearnPeriod(f.header.nvml_period_us, f.header.nvml_last_stamp_us, samples, count);
  f.header.nvml_period_us = static_cast<uint32_t>(learned);
  const uint64_t period_us = SamplePeriodUs(f);
  Usage usage;  // charged only when samples arrive: late, never lost
  RefillOutcome outcome = RefillOutcome::kIdle;
  // With no earlier stamp (the first read, or reads started over), what a sample covers before the last
  // refill is unknown: the guard errs toward the tenant, once.
  if (ChargeSamples(f, samples, count, f.header.nvml_last_stamp_us, dt_us, period_us, usage)) {
    f.header.nvml_last_seen_us = usage.newest_us;
    f.header.nvml_last_stamp_us = usage.newest_us;
    f.header.last_sample_ns = now_ns;
    outcome = RefillOutcome::kMeasured;
  } else if (f.header.last_sample_ns == 0) {
    outcome = RefillOutcome::kNeverMeasured;
  } else if (f.header.last_sample_ns + std::max<uint64_t>(kStaleSampleNs, 3 * period_us * 1000) >
             now_ns) {  // NVML samples once a period: the rate stands
    usage.total = f.header.card_util_percent;
    for (uint32_t i = 0; i < kMaxContainers; ++i) usage.util[i] = f.containers[i].util_percent;
    outcome = RefillOutcome::kKept;
  }  // else no process ran on the card lately: 0
  // What each container claims of the card: what it used and, while it wants to run (launched since the last
  // refill or is waiting) under an online share, at least that share. Processes NVML shows that no container
  // owns claim what they used. A guaranteed-burst-share container may use what the others leave, never less
  // than its share; so a burster gives way as soon as a container below its share wants it back.
  int64_t claim[kMaxContainers] = {};
  int64_t claimed = 0;
  int64_t used = 0;
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    const ContainerRecord& r = f.containers[i];
    if (!Load(r.in_use)) continue;
    const bool wants = Load(r.launches) != r.launches_at_refill || Load(r.waiting) > 0;
    claim[i] = usage.util[i];
    if (!Offline(r) && HeldToShare(r) && wants && claim[i] < r.share_percent) claim[i] = r.share_percent;
    claimed += claim[i];
    used += usage.util[i];
  }
  const int64_t strangers = usage.total > used ? usage.total - used : 0;
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    ContainerRecord& r = f.containers[i];
    if (!A(r.in_use).load()) continue;
    r.util_percent = usage.util[i];
    r.launches_at_refill = A(r.launches).load();
    if (!HeldToShare(r)) continue;
    int64_t gain = r.share_percent;
    // Offline work gains nothing while online work holds it back, and keeps no more than one refill's gain
    // (so that its first launch after the release goes at once): its percent is of the time it may run, not
    // saved up to burst past online's release.
    const bool held_back =
        Offline(r) && OfflineWaitNs(Load(f.header.online_last_launch_ns), now_ns, r.release_ns) > 0;
    if (held_back) gain = 0;
    if (!Offline(r) && r.policy == static_cast<uint32_t>(SharePolicy::kGuaranteedBurstShare)) {
      const int64_t others = strangers + claimed - claim[i];
      const int64_t left = others >= 100 ? 0 : 100 - others;
      if (left > gain) gain = left;
    }
    // What its credit may hold. Use is charged when NVML reports it, up to one and a half sample periods
    // late, and a driver that names one process per period (an H100; an H200) charges it the period's whole
    // use at once, after periods that named others: so while a container runs, its credit holds its share's
    // gain over a 100 ms burst and that lag, plus one period of the whole card, or the gains of the periods
    // between its charges would be thrown away (with the larger of the two instead of their sum, the 50 of a
    // simulated 20+30+50 held 47.5 over 20 s). A container that has not launched, waited or been measured
    // for that lag has nothing in flight, and keeps its 100 ms burst.
    const int64_t share = r.share_percent;
    const int64_t burst = StartingCredit(r.share_percent);
    const int64_t lag = std::max<int64_t>(kSampleLagUs, static_cast<int64_t>(period_us + period_us / 2));
    const bool running = Load(r.waiting) > 0 ||
                         Load(r.last_launch_ns) + static_cast<uint64_t>(lag) * 1000 > now_ns ||
                         usage.util[i] > 0;
    const int64_t most = running ? share * (kBurstUs + lag) + 100 * static_cast<int64_t>(period_us) : burst;
    int64_t credit = A(r.credit).load() + gain * static_cast<int64_t>(dt_us) - usage.busy[i];
    // What it saved while idle, held back by online work, or under guaranteed-burst-share while it used what
    // the others left, is not kept once it runs at its share again: a start after idle bursts no more than
    // 100 ms of the share, and a burster gives way as soon as the others want their shares back (keeping a
    // period of the whole card, a bursting 30 held a simulated 70 that joined it to 57 percent of its first
    // second). It keeps what pays for the use NVML has not reported yet, at its last measured rate.
    const bool saving = !running || gain != share;
    if (!saving && (A(r.flags).load() & kContainerSaved)) {
      const uint64_t unreported_us =
          f.header.last_sample_ns && now_ns > f.header.last_sample_ns
              ? std::min<uint64_t>((now_ns - f.header.last_sample_ns) / 1000, static_cast<uint64_t>(lag))
              : 0;
      credit = std::min(credit, burst + static_cast<int64_t>(usage.util[i] * unreported_us));
    }
    if (held_back) credit = std::min<int64_t>(credit, share * static_cast<int64_t>(kRefillNs / 1000));
    if (saving) {
      A(r.flags).fetch_or(kContainerSaved);
    } else {
      A(r.flags).fetch_and(~kContainerSaved);
    }
    // It may owe up to a second of the whole card, since a debt forgiven is compute taken beyond the share.
    credit = credit > most ? most : (credit < kMostDebt ? kMostDebt : credit);
    A(r.credit).store(credit);
  }
  f.header.card_util_percent = usage.total;
  A(f.header.last_refill_ns).store(now_ns);
  return outcome;
}

bool HeldToShare(const Settings& s) {
  return s.share_percent > 0 && (s.qos == QosLevel::kOffline || s.policy != SharePolicy::kNativeBurstShare);
}

Hold LaunchHold(const StateFile& f, const ContainerRecord& r, const Settings& s, bool measured,
                uint64_t now_ns) {
  if (s.qos == QosLevel::kOffline &&
      OfflineWaitNs(Load(f.header.online_last_launch_ns), now_ns, s.release_ns) > 0)
    return Hold::kOnline;
  if (measured && HeldToShare(s) && Load(r.credit) <= 0) return Hold::kShare;
  return Hold::kNone;
}

}  // namespace mgpu::guard
