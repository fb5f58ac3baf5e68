// The compute share and online over offline, at the edge: NVML's utilisation samples read, the budgets
// refilled (the rules are budget.h's), and every launch hook held while its rules say wait.
#include <dlfcn.h>
#include <time.h>

#include "guard/budget.h"
#include "guard/guard_internal.h"

namespace mgpu::guard {
namespace {

constexpr uint64_t kWaitStepNs = 2'000'000;        // a waiting launch re-checks this often
constexpr uint64_t kNvmlSilentNs = 2'000'000'000;  // never a sample for this long: say so
constexpr unsigned kMaxSamples = 128;

using NvmlInitFn = nvmlReturn_t (*)();
using NvmlHandleByUuidFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using NvmlProcessUtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                           unsigned long long);
NvmlHandleByUuidFn g_nvml_by_uuid = nullptr;
NvmlProcessUtilFn g_nvml_process_util = nullptr;
std::once_flag g_nvml_once;
nvmlDevice_t g_nvml_devices[kMaxCards];

bool LoadNvml() {
  Once(g_nvml_once, [] {
    DlsymFn sym = RealDlsym();
    void* lib = sym ? dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
    auto init = lib ? reinterpret_cast<NvmlInitFn>(sym(lib, "nvmlInit_v2")) : nullptr;
    g_nvml_by_uuid =
        lib ? reinterpret_cast<NvmlHandleByUuidFn>(sym(lib, "nvmlDeviceGetHandleByUUID")) : nullptr;
    g_nvml_process_util =
        lib ? reinterpret_cast<NvmlProcessUtilFn>(sym(lib, "nvmlDeviceGetProcessUtilization")) : nullptr;
    if (!init || !g_nvml_by_uuid || !g_nvml_process_util || init() != NVML_SUCCESS) {
      g_nvml_process_util = nullptr;
      Log(LogClass::kNvml, true, "libnvidia-ml.so.1 cannot be used, so compute shares are not enforced");
      return;
    }
    for (int i = 0; i < g_settings.card_count; ++i) {
      if (g_nvml_by_uuid(g_settings.cards[i], &g_nvml_devices[i]) != NVML_SUCCESS)
        g_nvml_devices[i] = nullptr;
    }
  });
  return g_nvml_process_util != nullptr;
}

// NVML's samples of card `index` newer than the card's last seen, into `samples` (kMaxSamples); how many.
unsigned ReadSamples(int index, StateFile& f, UtilSample* samples) {
  nvmlDevice_t device = g_nvml_devices[index];
  if (!device) return 0;
  unsigned int count = kMaxSamples;
  const nvmlReturn_t rc = g_nvml_process_util(device, samples, &count, f.header.nvml_last_seen_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    // The driver keeps a backlog (72 samples on an H100 at the first call): skip it and read only what is
    // new from now on, or every call would ask for the whole backlog again and never measure.
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    f.header.nvml_last_seen_us = static_cast<uint64_t>(ts.tv_sec) * 1'000'000ULL + ts.tv_nsec / 1000;
    return 0;
  }
  if (rc != NVML_SUCCESS) return 0;
  return count > kMaxSamples ? kMaxSamples : count;
}

// Refills the budgets of card `index` when due.
void RefillCard(int index, CardHandle& c, uint64_t now) {
  StateFile& f = *c.file;
  if (!RefillDue(f, now)) return;
  if (!LoadNvml()) return;
  std::lock_guard<std::mutex> hold(*g_mutex);
  CardLock lock(c);
  if (!RefillDue(f, now)) return;
  static UtilSample samples[kMaxSamples];  // under g_mutex
  const unsigned count = ReadSamples(index, f, samples);
  if (Refill(f, samples, count, now) == RefillOutcome::kNeverMeasured) {
    // A driver without per-process accounting answers NOT_FOUND for ever: then the share cannot be
    // measured, and the operator should know.
    static uint64_t unmeasured_since = 0;
    if (unmeasured_since == 0) unmeasured_since = now;
    if (now - unmeasured_since > kNvmlSilentNs)
      Log(LogClass::kNvml, true,
          "card=%s: NVML has reported no utilisation for 2 s of launches, so the compute share is not "
          "enforced on this card",
          g_settings.cards[index]);
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
  uint64_t now = NowNs();
  if (s.qos == QosLevel::kOffline) {
    uint64_t wait = OfflineWaitNs(A(f.header.online_last_launch_ns).load(), now, s.release_ns);
    if (wait > 0) {
      Log(LogClass::kHold, false, "card=%s: an offline launch waits while online work runs on the card",
          s.cards[index]);
      A(r.held_back).fetch_add(1);
      A(r.waiting).fetch_add(1);
      const uint64_t start = now;
      while (wait > 0) {
        SleepNs(wait < kWaitStepNs ? wait : kWaitStepNs);
        now = NowNs();
        wait = OfflineWaitNs(A(f.header.online_last_launch_ns).load(), now, s.release_ns);
      }
      A(r.held_ns).fetch_add(now - start);
      A(r.waiting).fetch_sub(1);
    }
  } else if (s.policy != SharePolicy::kNativeBurstShare && s.share_percent > 0 && LoadNvml()) {
    RefillCard(index, *c, now);
    if (A(r.credit).load() <= 0) {
      Log(LogClass::kThrottle, false, "card=%s: a launch waits for the container's %u percent compute share",
          s.cards[index], s.share_percent);
      A(r.throttled).fetch_add(1);
      A(r.waiting).fetch_add(1);
      while (A(r.credit).load() <= 0) {
        SleepNs(kWaitStepNs);
        now = NowNs();
        RefillCard(index, *c, now);
      }
      A(r.waiting).fetch_sub(1);
    }
  }
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
