#include "guard/testing/sim_card.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>

namespace mgpu::guard::sim {
namespace {

constexpr uint64_t kMonotonicBaseNs = 1'000'000'000;         // the simulation's t = 0 on CLOCK_MONOTONIC
constexpr uint64_t kRealtimeBaseUs = 1'700'000'000'000'000;  // and on CLOCK_REALTIME

struct Pending {
  UtilSample sample;
  uint64_t readable_us;
};

struct Process {
  Settings settings;
  uint32_t record = 0;
  uint32_t pid = 0;
  int queued = 0;          // kernels on the card's queue
  uint64_t head_left = 0;  // card time the head kernel still needs, us
  int launched = 0;        // kernels of the current batch launched
  bool waiting = false;    // a launch is held
  bool held_online = false;
  uint64_t wake_us = 0;         // a held launch asks again then
  uint64_t window_busy = 0;     // card time held in the current sample period, us
  bool warmed = false;          // its warm-up batch is launched
  uint64_t last_busy_us = 0;    // it last held the card
  uint64_t reader_wake_us = 0;  // its NVML reader's next refill
};

}  // namespace

double Result::Share(int t, uint64_t from_ms, uint64_t to_ms) const {
  const size_t a = from_ms / bin_ms, b = std::min<size_t>(to_ms / bin_ms, used[t].size());
  double sum = 0;
  for (size_t i = a; i < b; ++i) sum += used[t][i];
  return b > a ? 100 * sum / static_cast<double>(b - a) : 0;
}

double Result::Idle(uint64_t from_ms, uint64_t to_ms) const {
  double held = 0;
  for (size_t t = 0; t < used.size(); ++t) held += Share(static_cast<int>(t), from_ms, to_ms);
  return 100 - held;
}

double Result::JudgedShare(int t, uint64_t from_ms, uint64_t to_ms) const {
  const double period_ms = static_cast<double>(period_us) / 1000;
  double covered = 0;
  for (const Sample& s : samples) {
    if (s.tenant != t) continue;
    const double end = static_cast<double>(s.stamp_ms);
    const double overlap =
        std::min(end, static_cast<double>(to_ms)) - std::max(end - period_ms, static_cast<double>(from_ms));
    if (overlap > 0) covered += s.sm * overlap;
  }
  return to_ms > from_ms ? covered / static_cast<double>(to_ms - from_ms) : 0;
}

uint64_t Result::SettledAfter(int t, uint64_t from_ms, uint64_t to_ms, double target, double tolerance,
                              uint64_t window_ms) const {
  const size_t bins = std::min<size_t>(used[t].size(), to_ms / bin_ms);
  const size_t w = std::max<size_t>(1, window_ms / bin_ms);
  size_t settled = SIZE_MAX;
  for (size_t i = from_ms / bin_ms; i + w <= bins; ++i) {
    double sum = 0;
    for (size_t k = i; k < i + w; ++k) sum += used[t][k];
    const double share = 100 * sum / static_cast<double>(w);
    if (share < target - tolerance || share > target + tolerance) {
      settled = SIZE_MAX;
    } else if (settled == SIZE_MAX) {
      settled = i;
    }
  }
  return settled == SIZE_MAX ? UINT64_MAX : settled * bin_ms - from_ms;
}

Result Simulate(const Config& config, const std::vector<Tenant>& tenants) {
  auto f = std::make_unique<StateFile>();
  InitState(*f, "GPU-simulated");
  std::vector<Process> procs(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    Process& p = procs[i];
    const Tenant& t = tenants[i];
    p.settings.qos = t.qos;
    p.settings.policy = t.policy;
    p.settings.share_percent = t.share;
    p.settings.release_ns = config.release_ns;
    p.record = static_cast<uint32_t>(i);
    p.pid = 1000 + static_cast<uint32_t>(i);
  }
  const uint64_t bin_us = 100'000;
  Result result;
  result.used.assign(tenants.size(), std::vector<double>(config.duration_ms / 100, 0.0));
  result.throttled.assign(tenants.size(), 0);
  result.held_back.assign(tenants.size(), 0);
  result.period_us = config.sample_period_us;
  std::vector<Pending> nvml;
  std::mt19937_64 rng(config.seed);
  const auto mono = [](uint64_t us) { return kMonotonicBaseNs + us * 1000; };
  uint64_t nominal_stamp_us = config.sample_period_us, next_stamp_us = nominal_stamp_us, last_stamp_us = 0;

  // The edge's refill (compute.cc's RefillCard): when due, the samples readable by now, newer than the last.
  const auto refill_if_due = [&](uint64_t now_us) {
    if (!RefillDue(*f, mono(now_us))) return;
    std::vector<UtilSample> fresh;
    for (const Pending& s : nvml) {
      if (s.readable_us <= now_us && s.sample.timeStamp > f->header.nvml_last_seen_us)
        fresh.push_back(s.sample);
    }
    Refill(*f, fresh.data(), static_cast<unsigned>(fresh.size()), mono(now_us));
  };

  for (uint64_t now = 0; now < config.duration_ms * 1000; now += config.step_us) {
    // Processes start and stop, launch when they can, and wait for their batch.
    for (size_t i = 0; i < procs.size(); ++i) {
      Process& p = procs[i];
      const Tenant& t = tenants[i];
      const uint64_t ms = now / 1000;
      const bool alive = ms + t.warmup_ms >= t.start_ms && ms < t.stop_ms;
      ContainerRecord& r = f->containers[p.record];
      ProcessSlot& slot = f->processes[i];
      if (!alive) {
        if (slot.in_use) {  // exited: the kernel drops its slot lock; the next reclaim frees the slot
          slot.in_use = 0;
          if (p.waiting) --r.waiting;
          p = Process{p.settings, p.record, p.pid};
        }
        continue;
      }
      if (!slot.in_use) {  // started: cards.cc's Register
        if (!r.in_use) {
          memset(&r, 0, sizeof(r));
          snprintf(r.token, sizeof(r.token), "tenant-%zu", i);
          r.credit = StartingCredit(t.share);
          r.in_use = 1;
        }
        r.qos = static_cast<uint32_t>(t.qos);
        r.policy = static_cast<uint32_t>(t.policy);
        r.share_percent = t.share;
        r.release_ns = t.qos == QosLevel::kOffline ? config.release_ns : 0;
        slot = ProcessSlot{};
        slot.in_use = 1;
        slot.container = p.record;
        slot.pid = static_cast<int32_t>(p.pid);
      }
      // compute.cc's reader: every kRefillNs, a refill when due while the container wants one.
      if (HeldToShare(p.settings) && now >= p.reader_wake_us) {
        if (RefillWanted(r, mono(now))) refill_if_due(now);
        p.reader_wake_us = now + kRefillNs / 1000;
      }
      const bool busy_phase = ms < t.start_ms
                                  ? !p.warmed
                                  : t.busy_ms == 0 || (ms - t.start_ms) % (t.busy_ms + t.idle_ms) < t.busy_ms;
      if (p.launched == config.kernels_per_sync && p.queued == 0) p.launched = 0;  // the batch is done
      while (busy_phase && p.launched < config.kernels_per_sync && now >= p.wake_us) {
        // compute.cc's BeforeLaunch, with its reader refilling.
        const bool measured = HeldToShare(p.settings);
        const Hold hold = LaunchHold(*f, r, p.settings, measured, mono(now));
        if (hold != Hold::kNone) {
          if (!p.waiting) {
            p.waiting = true;
            ++r.waiting;
            p.held_online = false;
          }
          if (hold == Hold::kOnline && !p.held_online) {
            p.held_online = true;
            ++result.held_back[i];
          }
          if (hold == Hold::kShare) ++result.throttled[i];
          uint64_t wait = kWaitStepNs;
          if (hold == Hold::kOnline)
            wait = std::min(wait,
                            OfflineWaitNs(f->header.online_last_launch_ns, mono(now), p.settings.release_ns));
          p.wake_us = now + (wait + 999) / 1000;
          break;
        }
        if (p.waiting) {
          p.waiting = false;
          --r.waiting;
        }
        NoteLaunch(*f, r, p.settings.qos, mono(now));
        if (p.queued++ == 0) p.head_left = config.kernel_us;
        if (++p.launched == config.kernels_per_sync) p.warmed = true;
      }
    }
    // The card: time-sliced evenly among the processes with queued work.
    int running = 0;
    for (const Process& p : procs) running += p.queued > 0;
    if (running > 0) {
      const uint64_t slice = config.step_us / static_cast<uint64_t>(running);
      for (size_t i = 0; i < procs.size(); ++i) {
        Process& p = procs[i];
        if (p.queued == 0) continue;
        p.window_busy += slice;
        p.last_busy_us = now;
        const size_t bin = now / bin_us;
        if (bin < result.used[i].size())
          result.used[i][bin] += static_cast<double>(slice) / static_cast<double>(bin_us);
        if (p.head_left > slice) {
          p.head_left -= slice;
        } else if (--p.queued > 0) {
          p.head_left = config.kernel_us;
        }
      }
    }
    // NVML: at the end of each sample period, what each process held in it.
    const uint64_t next = now + config.step_us;
    if (next >= next_stamp_us) {
      const uint64_t stamp = kRealtimeBaseUs + next;
      const uint64_t window = next - last_stamp_us;
      const auto percent = [&](uint64_t us) {
        return static_cast<uint32_t>(std::min<uint64_t>(100, us * 100 / window));
      };
      last_stamp_us = next;
      nominal_stamp_us += config.sample_period_us;
      next_stamp_us = nominal_stamp_us;
      if (config.stamp_jitter_us > 0)
        next_stamp_us += rng() % (2 * config.stamp_jitter_us + 1) - config.stamp_jitter_us;
      uint64_t total = 0;
      for (const Process& p : procs) total += p.window_busy;
      const auto report = [&](const Process& p, uint32_t sm) {
        nvml.push_back({UtilSample{p.pid, stamp, sm, 0, 0, 0}, next + config.report_delay_us});
        result.samples.push_back({next / 1000, static_cast<int>(&p - procs.data()), sm});
      };
      if (config.naming == Config::Naming::kOneInProportion && total > 0) {
        uint64_t pick = rng() % total;
        for (const Process& p : procs) {
          if (pick < p.window_busy) {
            report(p, percent(total));
            break;
          }
          pick -= p.window_busy;
        }
      } else if (config.naming == Config::Naming::kOneAtTheEnd && total > 0) {
        // One of those on the card at the stamp (time-sliced evenly), else the last to leave it.
        std::vector<const Process*> on;
        const Process* last = nullptr;
        for (const Process& p : procs) {
          if (p.queued > 0) on.push_back(&p);
          if (p.window_busy > 0 && (!last || p.last_busy_us > last->last_busy_us)) last = &p;
        }
        report(on.empty() ? *last : *on[rng() % on.size()], percent(total));
      } else if (config.naming == Config::Naming::kEveryProcess) {
        for (const Process& p : procs) {
          if (p.window_busy > 0) report(p, percent(p.window_busy));
        }
      }
      for (Process& p : procs) p.window_busy = 0;
      std::erase_if(nvml, [&](const Pending& s) { return s.readable_us + 2'000'000 < now; });
    }
  }
  return result;
}

}  // namespace mgpu::guard::sim
