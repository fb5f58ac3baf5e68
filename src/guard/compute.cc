// The compute share and online over offline, at the edge: NVML's utilisation samples read, the budgets
// refilled (the rules are budget.h's), and every launch hook held while its rules say wait. A process held
// to a share reads NVML on a thread of its own (the reader), never on a launching thread.
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cstdlib>
#include <new>

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

uint64_t NowRealUs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000ULL + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

// What one NVML read of a card answered.
struct Read {
  unsigned count = 0;       // new samples
  bool start_over = false;  // read only what is new from now on (a backlog to skip)
};

// NVML's samples of card `index` newer than `since_us`, into `samples` (kMaxSamples). Takes no lock: the
// driver's call can take milliseconds, and nothing waits for it.
Read ReadSamples(int index, uint64_t since_us, UtilSample* samples) {
  Read out;
  nvmlDevice_t device = g_nvml_devices[index].load(std::memory_order_relaxed);
  if (!device) return out;
  unsigned int count = kMaxSamples;
  const nvmlReturn_t rc = g_nvml_process_util(device, samples, &count, since_us);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    // The driver keeps a backlog (72 samples on an H100 at the first call): skip it and read only what is
    // new from now on, or every call would ask for the whole backlog again and never measure.
    out.start_over = true;
  } else if (rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_UNINITIALIZED ||
             rc == NVML_ERROR_INVALID_ARGUMENT) {
    // The card is gone from NVML (fell off the bus, driver reset): its use can no longer be measured, and
    // no launch should wait on a budget that will not refill by measurement.
    g_nvml_devices[index].store(nullptr);
    Log(LogClass::kNvmlLost, true,
        "card=%s: NVML answers %d (the card is lost), so the compute share is no longer enforced on it",
        g_settings.cards[index], rc);
  } else if (rc == NVML_SUCCESS) {
    out.count = count > kMaxSamples ? kMaxSamples : count;
  }
  return out;
}

std::atomic<bool> g_refilling{false};  // a thread of this process is refilling (owns the buffers below)

// Refills the budgets of card `index` when due: NVML read with no lock held, the samples charged under the
// card lock. A thread that finds another of this process refilling goes on without waiting.
void RefillCard(int index, CardHandle& c) {
  StateFile& f = *c.file;
  if (!RefillDue(f, NowNs()) || g_refilling.exchange(true, std::memory_order_acquire)) return;
  static UtilSample samples[kMaxSamples];  // under g_refilling
  static unsigned refills = 0;
  static uint64_t unmeasured_since = 0;
  const uint64_t real_us = NowRealUs();
  const uint64_t since = SamplesSince(f, real_us);
  Read read = ReadSamples(index, since, samples);
  {
    std::lock_guard<std::mutex> hold(*g_mutex);
    CardLock lock(c);
    const uint64_t now = NowNs();
    if (RefillDue(f, now)) {
      if (FromAnotherClock(f.header.last_refill_ns, now))
        Log(LogClass::kClockRefill, true,
            "card=%s: the last refill is stamped more than a second in the future (another clock?), so the "
            "guard refills from now on",
            g_settings.cards[index]);
      if (SamplesSince(f, real_us) != f.header.nvml_last_seen_us) {
        Log(LogClass::kClockNvml, true,
            "card=%s: the newest NVML sample is stamped later than the realtime clock (set back?), so the "
            "guard reads samples from now on",
            g_settings.cards[index]);
        read.start_over = true;
      }
      if (read.start_over) {
        f.header.nvml_last_seen_us = real_us;
        f.header.nvml_last_stamp_us = 0;
      }
      // Another process may have charged some of these since they were read.
      unsigned fresh = 0;
      for (unsigned i = 0; i < read.count; ++i) {
        if (samples[i].timeStamp > f.header.nvml_last_seen_us) samples[fresh++] = samples[i];
      }
      if (++refills % kReclaimEveryRefills == 0) ReclaimDead(c);
      if (Refill(f, samples, fresh, now) == RefillOutcome::kNeverMeasured) {
        // A driver without per-process accounting answers NOT_FOUND for ever: then the share cannot be
        // measured, and the operator should know.
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
  }
  g_refilling.store(false, std::memory_order_release);
}

// ---- the reader: one thread per process held to a share refills its cards' budgets every kRefillNs while
// its container launches or waits, so that a launch never waits for NVML (whose call takes milliseconds on
// a real driver: made inline at a refill every 20 ms, it is the likely cause of a launch-bound loop's 13
// percent loss on an H200). Started at the first launch that needs it; where it cannot start, launches refill
// themselves as before.

enum ReaderState : int { kReaderNone = 0, kReaderRunning = 1, kReaderFailed = -1 };
std::atomic<int> g_reader{kReaderNone};
std::atomic<bool> g_reader_stop{false};
std::atomic<bool> g_reader_inside{false};  // the thread is awake, between two sleeps
std::once_flag g_reader_once;

void* ReaderMain(void*) {
  while (!g_reader_stop.load(std::memory_order_acquire)) {
    SleepNs(kRefillNs);
    g_reader_inside.store(true, std::memory_order_seq_cst);
    if (g_reader_stop.load(std::memory_order_seq_cst)) break;
    for (int i = 0; i < g_settings.card_count; ++i) {
      CardHandle& c = g_cards[i];
      if (c.status.load(std::memory_order_acquire) != 1 || !Measurable(i) ||
          !RefillWanted(c.file->containers[c.container], NowNs()))
        continue;
      RefillCard(i, c);
    }
    g_reader_inside.store(false, std::memory_order_release);
  }
  g_reader_inside.store(false, std::memory_order_release);
  return nullptr;
}

// At exit, before the libraries' destructors run (NVML's among them): the reader stops between two reads,
// or is left after 200 ms (a driver call that hangs).
void StopReader() {
  g_reader_stop.store(true, std::memory_order_seq_cst);
  for (int i = 0; i < 200 && g_reader_inside.load(std::memory_order_seq_cst); ++i) SleepNs(1'000'000);
}

void StartReaderOnce() {
  Once(g_reader_once, [] {
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_t thread;
    bool started = false;
    // The thread takes none of the program's signals, and reserves a small stack (NVML's calls included).
    if (pthread_attr_init(&attr) == 0) {
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      pthread_attr_setstacksize(&attr, 1 << 20);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      started = pthread_create(&thread, &attr, ReaderMain, nullptr) == 0;
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      pthread_attr_destroy(&attr);
    }
    if (started) {
      atexit(StopReader);
      g_reader.store(kReaderRunning, std::memory_order_release);
    } else {
      g_reader.store(kReaderFailed, std::memory_order_release);
      Log(LogClass::kReader, true,
          "the guard could not start its NVML reader thread, so launches refill the compute budgets "
          "themselves");
    }
  });
}

// Whether the reader refills this process's budgets (starting it at the first call).
bool ReaderRefills() {
  const int state = g_reader.load(std::memory_order_relaxed);
  if (state == kReaderNone) {
    StartReaderOnce();
    return g_reader.load(std::memory_order_acquire) == kReaderRunning;
  }
  return state == kReaderRunning;
}

}  // namespace

// A fork's child has no reader thread (process.cc calls it).
void ForgetReaderInChild() {
  new (&g_reader_once) std::once_flag;
  g_reader.store(kReaderNone);
  g_reader_stop.store(false);
  g_reader_inside.store(false);
  g_refilling.store(false);
}

namespace {

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
  const bool reader = shared && Measurable(index) && ReaderRefills();
  for (;;) {
    const bool measured = shared && Measurable(index);
    if (measured && !reader) RefillCard(index, *c);
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
