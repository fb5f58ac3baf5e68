// What the parts of libmgpu-guard.so share; included only by the library's own files. The library, by file:
//   process.cc  the clocks, the log (one line per decision class per process), the settings read once, fork
//   driver.cc   the real dlsym and driver, the hook table, dlsym and cuGetProcAddress answered with hooks
//   cards.cc    each visible card's shared state: attach, register, reclaim the dead, device -> card
//   memory.cc   the memory cap: allocation, free and cuMemGetInfo hooks
//   compute.cc  NVML's utilisation samples (read by a thread of each process held to a share), the budget
//               refill, the launch rules and the launch hooks
//   nvml.cc     NVML as the container sees it: its slice's memory, its own processes and use
// with the rules as plain code beside them (settings.h, budget.h) and the state layout in state.h.
//
// Safety first, everywhere: nothing throws out of a hook, nothing allocates on a hot path, and with a missing
// or bad environment, an unusable state file or no driver the guard steps aside (forwards everything) after
// one sentence on stderr.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "guard/cuda_api.h"
#include "guard/hooks.h"
#include "guard/settings.h"
#include "guard/state.h"

#define MGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace mgpu::guard {

inline constexpr uint64_t kMiB = 1 << 20;
inline constexpr int kMaxOrdinals = 64;

template <typename T>
std::atomic_ref<T> A(T& field) {
  return std::atomic_ref<T>(field);
}

// std::call_once never throws out of here (it could only on a failing pthread call): the guard does without.
template <typename F>
void Once(std::once_flag& flag, F f) {
  try {
    std::call_once(flag, f);
  } catch (...) {
  }
}

// ---- process.cc

uint64_t NowNs();  // CLOCK_MONOTONIC
void SleepNs(uint64_t ns);

enum class LogClass {
  kStepAside,
  kAttached,
  kCard,
  kOom,
  kThrottle,
  kHold,
  kNvml,
  kNvmlLost,
  kReader,
  kClockOnline,
  kClockRefill,
  kClockNvml,
  kRepair,
  kCount
};
// Writes one line to stderr, at most once per class per process; unless `always`, only with MGPU_GUARD_LOG.
void Log(LogClass cls, bool always, const char* format, ...) __attribute__((format(printf, 3, 4)));

// The container's settings, read from the environment at first use; .active false: the guard steps aside.
extern Settings g_settings;
const Settings& GetSettings();

// ---- driver.cc

using DlsymFn = void* (*)(void*, const char*) noexcept;  // noexcept: lets dlsym tail-call it
DlsymFn RealDlsym();

enum Hook : int {
#define MGPU_ENUM(name, ...) k_##name,
  MGPU_GUARD_HOOKS(MGPU_ENUM)
#undef MGPU_ENUM
      kHookCount
};

// The real driver's functions, filled by the first LoadDriver (nullptr: absent).
extern std::atomic<void*> g_real[kHookCount];
void LoadDriver();
template <typename Fn>
Fn Real(Hook hook) {
  LoadDriver();
  return reinterpret_cast<Fn>(g_real[hook].load(std::memory_order_relaxed));
}
#define MGPU_REAL(name) ::mgpu::guard::Real<decltype(&::name)>(::mgpu::guard::k_##name)

// Driver functions the guard calls but does not hook, filled by the first LoadDriver (nullptr: absent).
using CtxGetDeviceFn = CUresult (*)(CUdevice*);
using DeviceGetUuidFn = CUresult (*)(CUuuid*, CUdevice);
extern CtxGetDeviceFn g_ctx_get_device;
extern DeviceGetUuidFn g_device_get_uuid;

// ---- cards.cc

struct CardHandle {
  std::atomic<int> status{0};  // 0 not opened, 1 attached, -1 stepped aside
  int fd = -1;                 // -1 with a file: a state of the process's own
  StateFile* file = nullptr;
  bool private_state = false;
  int slot = -1;
  uint32_t container = 0;
};
extern CardHandle g_cards[kMaxCards];
extern std::mutex* g_mutex;  // the process's own bookkeeping; never destroyed: hooks may run during exit

// The card lock of the shared state (a record lock: the kernel drops it with a dying process).
class CardLock {
 public:
  explicit CardLock(CardHandle& c) : c_(c) { LockCard(c_.fd); }
  ~CardLock() { UnlockCard(c_.fd); }

 private:
  CardHandle& c_;
};

// Attaches visible card `index` at first use; nullptr when the guard steps aside there.
CardHandle* AttachCard(int index);
inline CardHandle* CardAt(int index) {
  CardHandle& c = g_cards[index];
  const int status = c.status.load(std::memory_order_acquire);
  if (status == 1) return &c;
  return status == 0 ? AttachCard(index) : nullptr;
}

// The visible card index of device `device` (-1: the current context's device), or -1 when it is not one.
int CardOfDevice(CUdevice device);

// Frees the slots of processes that died holding memory (their slot lock is free). Under the card lock.
void ReclaimDead(CardHandle& c);

// A fork's child owns none of its parent's slots or allocations (process.cc calls it).
void ForgetCardsInChild();

// What the container holds on visible card `index`, as its NVML view shows it (nvml.cc): false when the
// guard does not guard that card.
struct SliceView {
  uint64_t cap_bytes = 0;
  uint64_t used_bytes = 0;
  uint32_t util_percent = 0;
  bool util_known = false;  // measured in the last second
  unsigned processes = 0;
  int32_t pid[kMaxProcesses] = {};
  uint64_t bytes[kMaxProcesses] = {};
};
bool ViewSlice(int index, SliceView& view);

// ---- memory.cc

void ForgetAllocationsInChild();

// ---- compute.cc

// A fork's child has no NVML reader thread; its first launch held to a share starts one.
void ForgetReaderInChild();

// ---- nvml.cc

// dlsym of a "nvml..." name: the hook when the real lookup finds NVML's function of that name.
void* DlsymNvml(DlsymFn real, void* handle, const char* name) noexcept;

}  // namespace mgpu::guard
