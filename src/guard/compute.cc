// The compute share and online over offline, at the edge: NVML's utilisation samples read, the budgets
// refilled (the rules are budget.h's), and every launch hook held while its rules say wait.
#include <dlfcn.h>
#include <time.h>

#include "guard/budget.h"
#include "guard/guard_internal.h"

namespace mgpu::guard {
namespace {

constexpr uint64_t kNvmlSilentNs = 2'000'000'000;  // never a sample for this long: say so
constexpr unsigned kMaxSamples = 128;
constexpr unsigned kReclaimEveryRefills = 50;  // about a second: a dead process's waiting launches are let go

using NvmlInitFn = nvmlReturn_t (*)();
using NvmlHandleByUuidFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using NvmlProcessUtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                           unsigned long long);
NvmlProcessUtilFn g_nvml_process_util = nullptr;
std::once_flag g_nvml_once;
std::atomic<bool> g_nvml_loaded{false};
std::atomic<nvmlDevice_t> g_nvml_devices[kMaxCards];  // nullptr: this card's use cannot be measured

void LoadNvmlOnce() {
  Once(g_nvml_once, [] {
    DlsymFn sym = RealDlsym();
    void* lib = sym ? dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
    auto init = lib ? reinterpret_cast<NvmlInitFn>(sym(lib, "nvmlInit_v2")) : nullptr;
    auto by_uuid =
        lib ? reinterpret_cast<NvmlHandleByUuidFn>(sym(lib, "nvmlDeviceGetHandleByUUID")) : nullptr;
    auto util =
        lib ? reinterpret_cast<NvmlProcessUtilFn>(sym(lib, "nvmlDeviceGetProcessUtilization")) : nullptr;
    if (!init || !by_uuid || !util || init() != NVML_SUCCESS) {
      Log(LogClass::kNvml, true, "libnvidia-ml.so.1 cannot be used, so compute shares are not enforced");
      return;
    }
    for (int i = 0; i < g_settings.card_count; ++i) {
      nvmlDevice_t device = nullptr;
      if (by_uuid(g_settings.cards[i], &device) == NVML_SUCCESS) g_nvml_devices[i].store(device);
    }
    g_nvml_process_util = util;
  });
  g_nvml_loaded.store(true, std::memory_order_release);
}

// Whether the use of visible card `index` can be measured (NVML loaded and the card still there).
bool Measurable(int index) {
  if (!g_nvml_loaded.load(std::memory_order_acquire)) LoadNvmlOnce();
  return g_nvml_process_util && g_nvml_devices[index].load(std::memory_order_relaxed);
}

// NVML's samples of card `index` newer than the card's last seen, into `samples` (kMaxSamples); how many.
// Under g_mutex and the card lock.
unsigned ReadSamples(int index, StateFile& f, UtilSample* samples) {
  nvmlDevice_t device = g_nvml_devices[index].load(std::memory_order_relaxed);
  if (!device) return 0;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t now_real_us = static_cast<uint64_t>(ts.tv_sec) * 1'000'000ULL + ts.tv_nsec / 1000;
  if (SamplesSince(f, now_real_us) != f.header.nvml_last_seen_us) {
    Log(LogClass::kClockNvml, true,
        "card=%s: the newest NVML sample is stamped later than the realtime clock (set back?), so the guard "
        "reads samples from now on",
        g_settings.cards[index]);
    f.header.nvml_last_seen_us = now_real_us;
  }
  unsigned int count = kMaxSamples;
  const nvmlReturn_t rc = g_nvml_process_util(device, samples, &count, f.header.nvml_last_seen_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    // The driver keeps a backlog (72 samples on an H100 at the first call): skip it and read only what is
    // new from now on, or every call would ask for the whole backlog again and never measure.
    f.header.nvml_last_seen_us = now_real_us;
    return 0;
  }
  if (rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_UNINITIALIZED || rc == NVML_ERROR_INVALID_ARGUMENT) {
    // The card is gone from NVML (fell off the bus, driver reset): its use can no longer be measured, and
    // no launch should wait on a budget that will not refill by measurement.
    g_nvml_devices[index].store(nullptr);
    Log(LogClass::kNvmlLost, true,
        "card=%s: NVML answers %d (the card is lost), so the compute share is no longer enforced on it",
        g_settings.cards[index], rc);
    return 0;
  }
  if (rc != NVML_SUCCESS) return 0;
  return count > kMaxSamples ? kMaxSamples : count;
}

// Refills the budgets of card `index` when due.
void RefillCard(int index, CardHandle& c, uint64_t now) {
  StateFile& f = *c.file;
  if (!RefillDue(f, now)) return;
  std::lock_guard<std::mutex> hold(*g_mutex);
  CardLock lock(c);
  if (!RefillDue(f, now)) return;
  if (FromAnotherClock(f.header.last_refill_ns, now))
    Log(LogClass::kClockRefill, true,
        "card=%s: the last refill is stamped more than a second in the future (another clock?), so the guard "
        "refills from now on",
        g_settings.cards[index]);
  static unsigned refills = 0;  // under g_mutex
  if (++refills % kReclaimEveryRefills == 0) ReclaimDead(c);
  static UtilSample samples[kMaxSamples];  // under g_mutex
  const unsigned count = ReadSamples(index, f, samples);
  if (Refill(f, samples, count, now) == RefillOutcome::kNeverMeasured) {
    // A driver without per-process accounting answers NOT_FOUND for ever: then the share cannot be
    // measured, and the operator should know.
    static uint64_t unmeasured_since = 0;
    if (unmeasured_since == 0) unmeasured_since = now;
    if (now - unmeasured_since > kNvmlSilentNs) {
      A(f.containers[c.container].flags).fetch_or(kContainerShareUnmeasured);
      Log(LogClass::kNvml, true,
          "card=%s: NVML has reported no utilisation for 2 s of launches, so the compute share is not "
          "enforced on this card",
          g_settings.cards[index]);
    }
  }
}

// Called before every kernel launch on the current device: may wait, never fails.
void BeforeLaunch() {
  const int index = CardOfDevice(-1);
  CardHandle* c = index >= 0 ? CardAt(index) : nullptr;
  if (!c) return;
  const Settings& s = g_settings;
  StateFile& f = *c->file;
  ContainerRecord& r = f.containers[c->container];
  const bool shared = HeldToShare(s);
  uint64_t now = NowNs();
  if (s.qos == QosLevel::kOffline && FromAnotherClock(A(f.header.online_last_launch_ns).load(), now))
    Log(LogClass::kClockOnline, true,
        "card=%s: the last online launch is stamped more than a second in the future (another clock?), so "
        "offline launches do not wait for it",
        s.cards[index]);
  bool waiting = false, held = false, throttled = false;
  for (;;) {
    const bool measured = shared && Measurable(index);
    if (measured) RefillCard(index, *c, now);
    const Hold hold = LaunchHold(f, r, s, measured, now);
    if (hold == Hold::kNone) break;
    if (!waiting) {
      waiting = true;
      A(r.waiting).fetch_add(1);
      A(f.processes[c->slot].waiting).fetch_add(1);
    }
    uint64_t step = kWaitStepNs;
    if (hold == Hold::kOnline) {
      if (!held) {
        held = true;
        A(r.held_back).fetch_add(1);
        Log(LogClass::kHold, false, "card=%s: an offline launch waits while online work runs on the card",
            s.cards[index]);
      }
      const uint64_t left = OfflineWaitNs(A(f.header.online_last_launch_ns).load(), now, s.release_ns);
      if (left < step) step = left;
    } else if (!throttled) {
      throttled = true;
      A(r.throttled).fetch_add(1);
      Log(LogClass::kThrottle, false, "card=%s: a launch waits for the container's %u percent compute share",
          s.cards[index], s.share_percent);
    }
    SleepNs(step);
    const uint64_t later = NowNs();
    if (hold == Hold::kOnline) A(r.held_ns).fetch_add(later - now);
    now = later;
  }
  if (waiting) {
    A(f.processes[c->slot].waiting).fetch_sub(1);
    A(r.waiting).fetch_sub(1);
  }
  if (shared && !Measurable(index) && !(A(r.flags).load() & kContainerShareUnmeasured))
    A(r.flags).fetch_or(kContainerShareUnmeasured);  // /metrics shows the share is not held
  NoteLaunch(f, r, s.qos, now);
}

template <typename Call>
CUresult Launch(Call call) {
  try {
    BeforeLaunch();
  } catch (...) {
  }
  return call();
}

}  // namespace
}  // namespace mgpu::guard

using namespace mgpu::guard;

// ---- launches (MGPU_GUARD_LAUNCH_HOOKS)

#define MGPU_LAUNCH(name, parameters, arguments)   \
  MGPU_EXPORT CUresult name parameters {           \
    auto real = MGPU_REAL(name);                   \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;  \
    return Launch([&] { return real arguments; }); \
  }
MGPU_GUARD_LAUNCH_HOOKS(MGPU_LAUNCH)
#undef MGPU_LAUNCH
