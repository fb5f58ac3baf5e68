// libmgpu-guard.so: mgpu's CUDA driver API interposer (README, "Isolation"). Loaded into every process of an
// mgpu container by /etc/ld.so.preload, it enforces, per container and per visible card:
//   - a memory cap: the live device allocations of all the container's processes stay within MGPU_MEMORY_MIB;
//     an allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY, cuMemGetInfo reports the slice;
//   - a compute share: kernel launches pass a per-container budget refilled by the share and drained by the
//     container's measured SM utilisation (NVML), per compute policy;
//   - online over offline: an offline container's launch waits while an online container on the card
//     launched in the last 100 ms.
// It catches the driver however a program reaches it: the exported hook symbols (direct calls), dlsym on the
// driver (dlopen + dlsym), and cuGetProcAddress(_v2) (the CUDA runtime's entry-point lookup). The real
// driver is dlopen'ed at first use; no NVIDIA header or library is needed to build it.
//
// Safety first: it never throws out of a hook, and with a missing or bad environment, an unusable state file
// or no driver it steps aside (forwards everything) after one sentence on stderr.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "guard/cuda_api.h"
#include "guard/state.h"

#define MGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace mgpu::guard {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int kMaxCards = 16;
constexpr int kMaxOrdinals = 64;
constexpr uint64_t kRefillNs = 20'000'000;   // compute budgets are refilled at most this often
constexpr int64_t kBurstUs = 100'000;        // a full budget: the share for this long
constexpr uint64_t kWaitStepNs = 2'000'000;  // a waiting launch re-checks this often
constexpr uint64_t kMaxRefillGapUs = 1'000'000;
constexpr uint64_t kStaleSampleNs = 500'000'000;  // without new NVML samples for this long, utilisation is 0
constexpr int64_t kSampleLagUs = 250'000;       // NVML reports use this late, at most
constexpr int64_t kMostDebt = -100 * 1'000'000;   // percent x microseconds: a second of the card
constexpr uint64_t kNvmlSilentNs = 2'000'000'000;  // never a sample for this long: say so

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);
}

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

// ---- logging: one line per decision class per process, on stderr; no allocation.

enum class LogClass { kStepAside, kAttached, kCard, kOom, kThrottle, kHold, kNvml, kCount };
std::atomic<bool> g_logged[static_cast<int>(LogClass::kCount)];
bool g_log_enabled = false;

void Log(LogClass cls, bool always, const char* format, ...) __attribute__((format(printf, 3, 4)));
void Log(LogClass cls, bool always, const char* format, ...) {
  if (!always && !g_log_enabled) return;
  if (g_logged[static_cast<int>(cls)].exchange(true)) return;
  char line[512];
  int n = snprintf(line, sizeof(line), "mgpu-guard pid=%d: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  if (n > 0 && n < static_cast<int>(sizeof(line)))
    n += vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n), format, args);
  va_end(args);
  if (n < 0) return;
  size_t len = n < static_cast<int>(sizeof(line)) - 1 ? static_cast<size_t>(n) : sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
}

// ---- the real dlsym and the real driver

using DlsymFn = void* (*)(void*, const char*) noexcept;  // noexcept: lets dlsym tail-call it

DlsymFn RealDlsym() {
  static std::atomic<DlsymFn> real{nullptr};
  DlsymFn f = real.load(std::memory_order_acquire);
  if (f) return f;
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (f) break;
  }
  real.store(f, std::memory_order_release);
  return f;
}

// Every hooked entry point: its name and its hook. The real pointer is filled at first use.
// clang-format off
#define MGPU_GUARD_HOOKS(X)         \
  X(cuMemAlloc)                     \
  X(cuMemAlloc_v2)                  \
  X(cuMemAllocPitch_v2)             \
  X(cuMemAllocManaged)              \
  X(cuMemAllocAsync)                \
  X(cuMemAllocAsync_ptsz)           \
  X(cuMemAllocFromPoolAsync)        \
  X(cuMemAllocFromPoolAsync_ptsz)   \
  X(cuMemCreate)                    \
  X(cuArrayCreate_v2)               \
  X(cuArray3DCreate_v2)             \
  X(cuMipmappedArrayCreate)         \
  X(cuMemFree)                      \
  X(cuMemFree_v2)                   \
  X(cuMemFreeAsync)                 \
  X(cuMemFreeAsync_ptsz)            \
  X(cuMemRelease)                   \
  X(cuArrayDestroy)                 \
  X(cuMipmappedArrayDestroy)        \
  X(cuMemGetInfo)                   \
  X(cuMemGetInfo_v2)                \
  X(cuLaunchKernel)                 \
  X(cuLaunchKernel_ptsz)            \
  X(cuLaunchKernelEx)               \
  X(cuLaunchKernelEx_ptsz)          \
  X(cuLaunchCooperativeKernel)      \
  X(cuLaunchCooperativeKernel_ptsz) \
  X(cuGraphLaunch)                  \
  X(cuGraphLaunch_ptsz)             \
  X(cuGetProcAddress)               \
  X(cuGetProcAddress_v2)
// clang-format on

enum Hook : int {
#define MGPU_ENUM(name) k_##name,
  MGPU_GUARD_HOOKS(MGPU_ENUM)
#undef MGPU_ENUM
      kHookCount
};

struct HookEntry {
  const char* name;
  void* hook;
};
HookEntry g_hooks[kHookCount];  // filled by FillHooks (after the exports, at the end of the file)
std::atomic<void*> g_real[kHookCount];
void FillHooks();

// Driver functions the guard calls but does not hook.
using CtxGetDeviceFn = CUresult (*)(CUdevice*);
using DeviceGetUuidFn = CUresult (*)(CUuuid*, CUdevice);
CtxGetDeviceFn g_ctx_get_device = nullptr;
DeviceGetUuidFn g_device_get_uuid = nullptr;

void* g_driver = nullptr;
std::once_flag g_driver_once;

void LoadDriver() {
  Once(g_driver_once, [] {
    FillHooks();
    DlsymFn sym = RealDlsym();
    if (!sym) return;
    g_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!g_driver) return;
    for (int i = 0; i < kHookCount; ++i) g_real[i].store(sym(g_driver, g_hooks[i].name));
    g_ctx_get_device = reinterpret_cast<CtxGetDeviceFn>(sym(g_driver, "cuCtxGetDevice"));
    g_device_get_uuid = reinterpret_cast<DeviceGetUuidFn>(sym(g_driver, "cuDeviceGetUuid_v2"));
    if (!g_device_get_uuid)
      g_device_get_uuid = reinterpret_cast<DeviceGetUuidFn>(sym(g_driver, "cuDeviceGetUuid"));
  });
}

template <typename Fn>
Fn Real(Hook hook) {
  LoadDriver();
  return reinterpret_cast<Fn>(g_real[hook].load(std::memory_order_relaxed));
}

// ---- the container's settings, read once from the environment

struct Settings {
  bool active = false;
  int card_count = 0;
  char cards[kMaxCards][kUuidBytes] = {};
  uint64_t cap_bytes = 0;
  uint32_t share_percent = 0;
  QosLevel qos = QosLevel::kOnline;
  SharePolicy policy = SharePolicy::kFixedShare;
  char token[kTokenBytes] = {};
  char state_dir[512] = "/var/lib/mgpu/cards";
  uint64_t release_ns = 100'000'000;  // offline waits until online has been idle this long
};
Settings g_settings;
std::once_flag g_settings_once;

bool ParseUint(const char* text, uint64_t max, uint64_t& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || v > max) return false;
  out = v;
  return true;
}

bool TokenValid(const char* t) {
  const size_t n = strlen(t);
  if (n == 0 || n >= kTokenBytes) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = t[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  }
  return true;
}

// Fills `s` from the environment; "" when usable, else the sentence saying why the guard steps aside.
const char* ReadSettings(Settings& s) {
  const char* cards = getenv("MGPU_VISIBLE_CARDS");
  if (!cards || !*cards) return "MGPU_VISIBLE_CARDS is not set, so the guard steps aside";
  const char* p = cards;
  while (*p) {
    const char* comma = strchr(p, ',');
    const size_t len = comma ? static_cast<size_t>(comma - p) : strlen(p);
    if (len == 0 || len >= kUuidBytes || s.card_count == kMaxCards || memchr(p, '/', len))
      return "MGPU_VISIBLE_CARDS is not a list of card UUIDs, so the guard steps aside";
    memcpy(s.cards[s.card_count++], p, len);
    p += len + (comma ? 1 : 0);
  }
  uint64_t mib = 0;
  if (!ParseUint(getenv("MGPU_MEMORY_MIB"), uint64_t{1} << 30, mib) || mib == 0)
    return "MGPU_MEMORY_MIB is missing or not a positive whole number, so the guard steps aside";
  s.cap_bytes = mib * kMiB;
  const char* token = getenv("MGPU_CONTAINER_TOKEN");
  if (!token || !TokenValid(token))
    return "MGPU_CONTAINER_TOKEN is missing or not a token of letters, digits, '-' and '_', so the guard "
           "steps aside";
  strcpy(s.token, token);
  const char* qos = getenv("MGPU_QOS_LEVEL");
  if (qos && strcmp(qos, "offline") == 0) {
    s.qos = QosLevel::kOffline;
  } else if (qos && *qos && strcmp(qos, "online") != 0) {
    return "MGPU_QOS_LEVEL must be online or offline, so the guard steps aside";
  }
  const char* share_var = s.qos == QosLevel::kOnline ? "MGPU_CORE_PERCENT" : "MGPU_RECLAIMED_CORE_PERCENT";
  if (const char* share = getenv(share_var)) {
    uint64_t v = 0;
    if (!ParseUint(share, 100, v))
      return "the core percent is not a whole number from 0 to 100, so the guard steps aside";
    s.share_percent = static_cast<uint32_t>(v);
  }
  const char* policy = getenv("MGPU_COMPUTE_POLICY");
  if (!policy || !*policy || strcmp(policy, "fixed-share") == 0) {
    s.policy = SharePolicy::kFixedShare;
  } else if (strcmp(policy, "guaranteed-burst-share") == 0) {
    s.policy = SharePolicy::kGuaranteedBurstShare;
  } else if (strcmp(policy, "native-burst-share") == 0) {
    s.policy = SharePolicy::kNativeBurstShare;
  } else {
    return "MGPU_COMPUTE_POLICY is not fixed-share, guaranteed-burst-share or native-burst-share, so the "
           "guard "
           "steps aside";
  }
  if (const char* dir = getenv("MGPU_GUARD_STATE_DIR")) {
    if (!*dir || strlen(dir) >= sizeof(s.state_dir))
      return "MGPU_GUARD_STATE_DIR is empty or too long, so the guard steps aside";
    strcpy(s.state_dir, dir);
  }
  if (const char* ms = getenv("MGPU_GUARD_RELEASE_MS")) {
    uint64_t v = 0;
    if (!ParseUint(ms, 600'000, v))
      return "MGPU_GUARD_RELEASE_MS is not a whole number of milliseconds, so the guard steps aside";
    s.release_ns = v * 1'000'000ULL;
  }
  return "";
}

const Settings& GetSettings() {
  Once(g_settings_once, [] {
    const char* log = getenv("MGPU_GUARD_LOG");
    g_log_enabled = log && *log && strcmp(log, "0") != 0;
    Settings s;
    const char* why = ReadSettings(s);
    if (*why) {
      // An absent MGPU_VISIBLE_CARDS is a process outside mgpu: say so only when asked.
      Log(LogClass::kStepAside, getenv("MGPU_VISIBLE_CARDS") != nullptr, "%s", why);
      return;
    }
    s.active = true;
    g_settings = s;
    Log(LogClass::kAttached, false,
        "guarding %d card(s) for container token=%s: cap %llu MiB per card, share %u", s.card_count, s.token,
        static_cast<unsigned long long>(s.cap_bytes / kMiB), s.share_percent);
  });
  return g_settings;
}

// ---- the process's view of each card's state

struct CardHandle {
  std::atomic<int> status{0};  // 0 not opened, 1 attached, -1 stepped aside
  int fd = -1;
  StateFile* file = nullptr;
  int slot = -1;
  uint32_t container = 0;
};
CardHandle g_cards[kMaxCards];
std::mutex* g_mutex = new std::mutex;  // never destroyed: hooks may run during exit

// Device ordinal -> 2 + visible card index; 1: not an mgpu card; 0: not looked up yet.
std::atomic<int> g_ordinal_card[kMaxOrdinals];

struct Tracked {
  int card;
  uint64_t bytes;
};
enum Kind { kPointer, kHandle, kArray, kMipmapped, kKindCount };
std::unordered_map<uint64_t, Tracked>* g_tracked = nullptr;  // [kKindCount], under g_mutex

class CardLock {
 public:
  explicit CardLock(CardHandle& c) : c_(c) { LockCard(c_.fd); }
  ~CardLock() { UnlockCard(c_.fd); }

 private:
  CardHandle& c_;
};

// Frees the slots of processes that died holding memory (their slot lock is free). Under the card lock.
void ReclaimDead(CardHandle& c) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& p = c.file->processes[i];
    if (static_cast<int>(i) == c.slot || !A(p.in_use).load() || SlotHeld(c.fd, i)) continue;
    A(p.used_bytes).store(0);
    A(p.in_use).store(0);
  }
}

bool ContainerLive(CardHandle& c, uint32_t index) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& p = c.file->processes[i];
    if (A(const_cast<uint32_t&>(p.in_use)).load() && p.container == index &&
        (static_cast<int>(i) == c.slot || SlotHeld(c.fd, i)))
      return true;
  }
  return false;
}

// Claims a process slot and the container's record. Under g_mutex and the card lock.
bool Register(CardHandle& c, const Settings& s) {
  ReclaimDead(c);
  int slot = -1;
  for (uint32_t i = 0; i < kMaxProcesses && slot < 0; ++i) {
    if (TryLockSlot(c.fd, i)) slot = static_cast<int>(i);
  }
  if (slot < 0) return false;
  int record = -1;
  for (uint32_t i = 0; i < kMaxContainers && record < 0; ++i) {
    ContainerRecord& r = c.file->containers[i];
    if (A(r.in_use).load() && strncmp(r.token, s.token, kTokenBytes) == 0) record = static_cast<int>(i);
  }
  if (record < 0) {
    for (uint32_t i = 0; i < kMaxContainers && record < 0; ++i) {
      if (!A(c.file->containers[i].in_use).load() || !ContainerLive(c, i)) record = static_cast<int>(i);
    }
    if (record < 0) return false;
    ContainerRecord& r = c.file->containers[record];
    A(r.in_use).store(0);
    memset(&r, 0, sizeof(r));
    strcpy(r.token, s.token);
    r.credit = static_cast<int64_t>(s.share_percent) * kBurstUs;
    A(r.in_use).store(1);
  }
  ContainerRecord& r = c.file->containers[record];
  r.qos = static_cast<uint32_t>(s.qos);
  r.policy = static_cast<uint32_t>(s.policy);
  r.share_percent = s.share_percent;
  A(r.cap_bytes).store(s.cap_bytes);
  ProcessSlot& p = c.file->processes[slot];
  A(p.used_bytes).store(0);
  p.container = static_cast<uint32_t>(record);
  p.pid = static_cast<int32_t>(getpid());
  A(p.in_use).store(1);
  c.slot = slot;
  c.container = static_cast<uint32_t>(record);
  return true;
}

void StepAside(CardHandle& c, const char* uuid, const char* why) {
  Log(LogClass::kCard, true, "card=%s: %s, so the guard steps aside on this card", uuid, why);
  c.status.store(-1);
}

// Opens (creating or repairing when no one uses it) and maps the card's state, then registers the process.
void Attach(int index, const Settings& s) {
  CardHandle& c = g_cards[index];
  const char* uuid = s.cards[index];
  if (c.fd < 0) {
    char path[sizeof(s.state_dir) + kUuidBytes + 16];
    snprintf(path, sizeof(path), "%s/%s", s.state_dir, uuid);
    mkdir(path, 0777);
    snprintf(path, sizeof(path), "%s/%s/state", s.state_dir, uuid);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return StepAside(c, uuid, "the state file cannot be opened");
    fchmod(fd, 0666);
    c.fd = fd;
  }
  CardLock lock(c);
  if (!c.file) {
    struct stat st {};
    if (fstat(c.fd, &st) != 0) return StepAside(c, uuid, "the state file cannot be read");
    const size_t size = static_cast<size_t>(st.st_size);
    const bool fresh = size == 0;
    const auto map = [&] {
      void* m = mmap(nullptr, kStateFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd, 0);
      return m == MAP_FAILED ? nullptr : static_cast<StateFile*>(m);
    };
    // Mapped only when the file holds a whole state: a page past its end would kill the program on access.
    StateFile* file = nullptr;
    const char* why = "";
    if (!fresh && size < kStateFileBytes) {
      why = "the state file is shorter than a state";
    } else if (!fresh) {
      file = map();
      why = file ? CheckState(*file, size, uuid) : "the state file cannot be mapped";
    }
    if (*why) {
      if (AnyLockHeld(c.fd)) {
        if (file) munmap(file, kStateFileBytes);
        return StepAside(c, uuid, why);
      }
      Log(LogClass::kCard, true, "card=%s: %s and no process uses it, so the guard starts it afresh", uuid,
          why);
    }
    if (fresh || *why) {
      if (ftruncate(c.fd, static_cast<off_t>(kStateFileBytes)) != 0 || (!file && !(file = map()))) {
        if (file) munmap(file, kStateFileBytes);
        return StepAside(c, uuid, "the state file cannot be sized or mapped");
      }
      InitState(*file, uuid);
    }
    c.file = file;
  }
  if (!Register(c, s)) return StepAside(c, uuid, "the state file has no free process or container slot");
  c.status.store(1);
}

// The attached card of visible card `index`, or nullptr when the guard steps aside there.
CardHandle* CardAt(int index) {
  CardHandle& c = g_cards[index];
  int status = c.status.load(std::memory_order_acquire);
  if (status == 0) {
    std::lock_guard<std::mutex> hold(*g_mutex);
    if (c.status.load() == 0) Attach(index, g_settings);
    status = c.status.load();
  }
  return status == 1 ? &c : nullptr;
}

void FormatUuid(const CUuuid& u, char* out) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  snprintf(out, kUuidBytes, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

// The visible card index of device `device` (-1: current context's device), or -1.
int CardOfDevice(CUdevice device) {
  if (!GetSettings().active) return -1;
  LoadDriver();
  if (device < 0) {
    if (!g_ctx_get_device || g_ctx_get_device(&device) != CUDA_SUCCESS) return -1;
  }
  if (device < 0 || device >= kMaxOrdinals) return -1;
  const int known = g_ordinal_card[device].load(std::memory_order_relaxed);
  if (known != 0) return known - 2;
  int card = -1;
  CUuuid uuid{};
  if (g_device_get_uuid && g_device_get_uuid(&uuid, device) == CUDA_SUCCESS) {
    char text[kUuidBytes];
    FormatUuid(uuid, text);
    for (int i = 0; i < g_settings.card_count; ++i) {
      if (strcasecmp(text, g_settings.cards[i]) == 0) card = i;
    }
  }
  g_ordinal_card[device].store(card + 2, std::memory_order_relaxed);
  return card;
}

// ---- memory

// Takes `bytes` of the container's cap on card `index`; false when they do not fit.
bool Reserve(int index, uint64_t bytes) {
  CardHandle* c = CardAt(index);
  if (!c) return true;
  std::lock_guard<std::mutex> hold(*g_mutex);
  CardLock lock(*c);
  const uint64_t cap = g_settings.cap_bytes;
  uint64_t used = ContainerUsedBytes(*c->file, c->container);
  if (used + bytes > cap || used + bytes < used) {
    ReclaimDead(*c);
    used = ContainerUsedBytes(*c->file, c->container);
  }
  if (used + bytes > cap || used + bytes < used) {
    Log(LogClass::kOom, false,
        "card=%s: an allocation of %llu bytes would pass the cap (%llu of %llu used): out of memory",
        g_settings.cards[index], static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(used), static_cast<unsigned long long>(cap));
    return false;
  }
  A(c->file->processes[c->slot].used_bytes).fetch_add(bytes);
  return true;
}

void Unreserve(int index, uint64_t bytes) {
  CardHandle& c = g_cards[index];
  if (c.status.load() != 1 || c.slot < 0) return;
  auto used = A(c.file->processes[c.slot].used_bytes);
  uint64_t have = used.load();
  while (!used.compare_exchange_weak(have, have > bytes ? have - bytes : 0)) {
  }
}

void Track(Kind kind, uint64_t key, int card, uint64_t bytes) {
  std::lock_guard<std::mutex> hold(*g_mutex);
  if (!g_tracked) g_tracked = new std::unordered_map<uint64_t, Tracked>[kKindCount];
  g_tracked[kind][key] = Tracked{card, bytes};
}

void Untrack(Kind kind, uint64_t key) {
  Tracked t{-1, 0};
  {
    std::lock_guard<std::mutex> hold(*g_mutex);
    if (!g_tracked) return;
    auto it = g_tracked[kind].find(key);
    if (it == g_tracked[kind].end()) return;
    t = it->second;
    g_tracked[kind].erase(it);
  }
  Unreserve(t.card, t.bytes);
}

// Runs `call` (the real allocation) within the cap: `bytes` on device `device` (-1: the current one);
// `key` reads what to remember the allocation by once it succeeded.
template <typename Call, typename Key>
CUresult Allocate(Kind kind, CUdevice device, uint64_t bytes, Call call, Key key) {
  int card = -1;
  try {
    card = CardOfDevice(device);
    if (card >= 0 && !Reserve(card, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    card = -1;
  }
  const CUresult r = call();
  if (card < 0) return r;
  try {
    if (r != CUDA_SUCCESS) {
      Unreserve(card, bytes);
    } else {
      Track(kind, key(), card, bytes);
    }
  } catch (...) {
  }
  return r;
}

template <typename Call>
CUresult Free(Kind kind, uint64_t key, Call call) {
  const CUresult r = call();
  if (r == CUDA_SUCCESS && GetSettings().active) {
    try {
      Untrack(kind, key);
    } catch (...) {
    }
  }
  return r;
}

// cuMemGetInfo: the slice, never more than the card really has free.
template <typename Size, typename Call>
CUresult MemInfo(Size* free_bytes, Size* total_bytes, Call call) {
  const CUresult r = call();
  if (r != CUDA_SUCCESS || !free_bytes || !total_bytes) return r;
  try {
    const int card = CardOfDevice(-1);
    CardHandle* c = card >= 0 ? CardAt(card) : nullptr;
    if (!c) return r;
    const uint64_t cap = g_settings.cap_bytes;
    uint64_t used = 0;
    {
      // What a dead process held is free: frameworks size their caches from this answer.
      std::lock_guard<std::mutex> hold(*g_mutex);
      CardLock lock(*c);
      ReclaimDead(*c);
      used = ContainerUsedBytes(*c->file, c->container);
    }
    const uint64_t left = used < cap ? cap - used : 0;
    *free_bytes = static_cast<Size>(left < static_cast<uint64_t>(*free_bytes) ? left : *free_bytes);
    *total_bytes = static_cast<Size>(cap);
  } catch (...) {
  }
  return r;
}

// ---- compute: NVML utilisation, budgets, online over offline

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

// Per-container SM use of card `index` from NVML's new per-process samples, matched to the process slots by
// pid, as percent x microseconds in `busy` (and as a percentage of the time the samples cover in `util`).
// A sample stands for the window since the previous sample's timestamp: when processes time-share the card,
// the driver reports one process per window (seen on an H100: one sample per query, alternating between two
// busy processes in proportion to their time on the card), so a process is charged for the windows it held.
// Samples at one timestamp share its window, scaled to the card when they add up to more. False when NVML
// has nothing new. When no sample's pid is a guarded process's (a container's pid namespace hides host pids
// from the driver), the card's total is split by the launches each container made since the last refill.
bool MeasureUtil(int index, StateFile& f, uint64_t window_us, int64_t busy[kMaxContainers],
                 uint32_t util[kMaxContainers], uint32_t& total) {
  nvmlDevice_t device = g_nvml_devices[index];
  if (!device) return false;
  static nvmlProcessUtilizationSample_t samples[128];  // Refill holds g_mutex
  unsigned int count = 128;
  const unsigned long long since = f.header.nvml_last_seen_us;
  const nvmlReturn_t rc = g_nvml_process_util(device, samples, &count, since);
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    // The driver keeps a backlog (72 samples on an H100 at the first call): skip it and read only what is
    // new from now on, or every call would ask for the whole backlog again and never measure.
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    f.header.nvml_last_seen_us = static_cast<uint64_t>(ts.tv_sec) * 1'000'000ULL + ts.tv_nsec / 1000;
    return false;
  }
  if (rc != NVML_SUCCESS || count == 0) return false;
  if (count > 128) count = 128;
  std::sort(samples, samples + count, [](const auto& a, const auto& b) { return a.timeStamp < b.timeStamp; });
  int64_t matched_busy[kMaxContainers] = {};
  int64_t all_busy = 0;
  uint64_t covered = 0;
  bool matched = false;
  unsigned long long previous = since;
  for (unsigned i = 0; i < count;) {
    const unsigned long long stamp = samples[i].timeStamp;
    unsigned end = i;
    uint64_t group = 0;
    while (end < count && samples[end].timeStamp == stamp) group += samples[end++].smUtil;
    uint64_t window = previous == 0 || stamp <= previous ? window_us : stamp - previous;
    if (window > kMaxRefillGapUs) window = kMaxRefillGapUs;
    covered += window;
    for (; i < end; ++i) {
      const uint64_t card = group > 100 ? group : 100;  // a group adding up to more is scaled to the card
      const int64_t scaled = static_cast<int64_t>(uint64_t{samples[i].smUtil} * window * 100 / card);
      all_busy += scaled;
      for (const ProcessSlot& p : f.processes) {
        if (A(const_cast<uint32_t&>(p.in_use)).load() && static_cast<unsigned>(p.pid) == samples[i].pid) {
          matched_busy[p.container] += scaled;
          matched = true;
        }
      }
    }
    previous = stamp;
  }
  f.header.nvml_last_seen_us = previous;
  total = static_cast<uint32_t>(all_busy / static_cast<int64_t>(covered));
  if (total > 100) total = 100;
  uint64_t launches = 0;
  uint64_t recent[kMaxContainers] = {};
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    ContainerRecord& r = f.containers[i];
    recent[i] = A(r.launches).load() - r.launches_at_refill;
    launches += recent[i];
  }
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    if (matched) {
      busy[i] = matched_busy[i];
    } else {
      busy[i] = launches ? all_busy * static_cast<int64_t>(recent[i]) / static_cast<int64_t>(launches) : 0;
    }
    const int64_t percent = busy[i] / static_cast<int64_t>(covered);
    util[i] = static_cast<uint32_t>(percent > 100 ? 100 : percent);
  }
  return true;
}

// Refills every container's compute budget on card `index` by its share (and, for guaranteed-burst-share,
// what the card leaves idle) and drains it by the measured utilisation.
void Refill(int index, CardHandle& c, uint64_t now) {
  StateFile& f = *c.file;
  // Another process may have refilled after `now` was read: last > now means not due.
  if (A(f.header.last_refill_ns).load() + kRefillNs > now) return;
  if (!LoadNvml()) return;
  std::lock_guard<std::mutex> hold(*g_mutex);
  CardLock lock(c);
  const uint64_t last = f.header.last_refill_ns;
  if (last + kRefillNs > now) return;
  uint64_t dt_us = last == 0 ? kRefillNs / 1000 : (now - last) / 1000;
  if (dt_us > kMaxRefillGapUs) dt_us = kMaxRefillGapUs;
  uint32_t util[kMaxContainers] = {};
  int64_t busy[kMaxContainers] = {};  // charged only when samples arrive: late, never lost
  uint32_t total = 0;
  const bool fresh = MeasureUtil(index, f, dt_us, busy, util, total);
  if (fresh) {
    f.header.last_sample_ns = now;
  } else if (f.header.last_sample_ns == 0) {
    // A driver without per-process accounting answers NOT_FOUND for ever: then the share cannot be
    // measured, and the operator should know.
    static uint64_t unmeasured_since = 0;
    if (unmeasured_since == 0) unmeasured_since = now;
    if (now - unmeasured_since > kNvmlSilentNs)
      Log(LogClass::kNvml, true, "card=%s: NVML has reported no utilisation for 2 s of launches, so the compute "
          "share is not enforced on this card", g_settings.cards[index]);
  } else if (f.header.last_sample_ns + kStaleSampleNs > now) {  // NVML samples every ~1/6 s: the rate stands
    total = f.header.card_util_percent;
    for (uint32_t i = 0; i < kMaxContainers; ++i) util[i] = f.containers[i].util_percent;
  }  // else no process ran on the card lately: 0
  // What each container claims of the card: what it used and, while it wants to run (launched since the last
  // refill or is waiting) under a share, at least that share. Processes NVML shows that no container owns
  // claim what they used. A guaranteed-burst-share container may use what the others leave, never less than
  // its share; so a burster gives way as soon as a container below its share wants it back.
  const auto held_to_share = [](const ContainerRecord& r) {
    return r.qos == static_cast<uint32_t>(QosLevel::kOnline) &&
           r.policy != static_cast<uint32_t>(SharePolicy::kNativeBurstShare);
  };
  int64_t claim[kMaxContainers] = {};
  int64_t claimed = 0;
  int64_t used = 0;
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    const ContainerRecord& r = f.containers[i];
    if (!A(const_cast<uint32_t&>(r.in_use)).load()) continue;
    const bool wants = r.launches != r.launches_at_refill || r.waiting > 0;
    claim[i] = util[i];
    if (held_to_share(r) && wants && claim[i] < r.share_percent) claim[i] = r.share_percent;
    claimed += claim[i];
    used += util[i];
  }
  const int64_t strangers = total > used ? total - used : 0;
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    ContainerRecord& r = f.containers[i];
    if (!A(r.in_use).load()) continue;
    r.util_percent = util[i];
    r.launches_at_refill = A(r.launches).load();
    if (!held_to_share(r)) continue;
    int64_t gain = r.share_percent;
    if (r.policy == static_cast<uint32_t>(SharePolicy::kGuaranteedBurstShare)) {
      const int64_t others = strangers + claimed - claim[i];
      const int64_t left = others >= 100 ? 0 : 100 - others;
      if (left > gain) gain = left;
    }
    // Use is charged when NVML reports it, a sample period (about 1/6 s) late: the credit may hold what is
    // gained over a burst and that lag, or the charge of a period's use would find its gain thrown away; and
    // it may owe up to a second of the whole card, since a debt forgiven is compute taken beyond the share.
    const int64_t most = gain * (kBurstUs + kSampleLagUs);
    int64_t credit = A(r.credit).load() + gain * static_cast<int64_t>(dt_us) - busy[i];
    credit = credit > most ? most : (credit < kMostDebt ? kMostDebt : credit);
    A(r.credit).store(credit);
  }
  f.header.card_util_percent = total;
  A(f.header.last_refill_ns).store(now);
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
    // Held while the last online launch is less than release_ns old (or stamped after `now` was read).
    const auto recent = [&](uint64_t online) { return online != 0 && online + s.release_ns > now; };
    uint64_t online = A(f.header.online_last_launch_ns).load();
    if (recent(online)) {
      Log(LogClass::kHold, false, "card=%s: an offline launch waits while online work runs on the card",
          s.cards[index]);
      A(r.held_back).fetch_add(1);
      A(r.waiting).fetch_add(1);
      const uint64_t start = now;
      while (recent(online)) {
        const uint64_t left = online + s.release_ns - now;
        SleepNs(left < kWaitStepNs ? left : kWaitStepNs);
        now = NowNs();
        online = A(f.header.online_last_launch_ns).load();
      }
      A(r.held_ns).fetch_add(now - start);
      A(r.waiting).fetch_sub(1);
    }
  } else if (s.policy != SharePolicy::kNativeBurstShare && s.share_percent > 0 && LoadNvml()) {
    Refill(index, *c, now);
    if (A(r.credit).load() <= 0) {
      Log(LogClass::kThrottle, false, "card=%s: a launch waits for the container's %u percent compute share",
          s.cards[index], s.share_percent);
      A(r.throttled).fetch_add(1);
      A(r.waiting).fetch_add(1);
      while (A(r.credit).load() <= 0) {
        SleepNs(kWaitStepNs);
        now = NowNs();
        Refill(index, *c, now);
      }
      A(r.waiting).fetch_sub(1);
    }
  }
  if (s.qos == QosLevel::kOnline) {
    uint64_t seen = A(f.header.online_last_launch_ns).load();
    while (seen < now && !A(f.header.online_last_launch_ns).compare_exchange_weak(seen, now)) {
    }
  }
  A(r.launches).fetch_add(1);
  A(r.last_launch_ns).store(now);
}

template <typename Call>
CUresult Launch(Call call) {
  try {
    BeforeLaunch();
  } catch (...) {
  }
  return call();
}

void* HookFor(void* real) {
  if (!real) return nullptr;
  for (int i = 0; i < kHookCount; ++i) {
    if (g_real[i].load(std::memory_order_relaxed) == real) return g_hooks[i].hook;
  }
  return nullptr;
}

// cuGetProcAddress answered `symbol` with `found`: the hook of the same function. By address first; by name
// when the driver answers with an address it does not export: the per-thread-stream form when asked for
// (flag 2), the _v2 form from CUDA 3.2 on (12.0 for cuGetProcAddress itself), else the base name.
void* HookForLookup(const char* symbol, void* found, int cuda_version, cuuint64_t flags) {
  if (void* hook = HookFor(found)) return hook;
  if (!symbol || strlen(symbol) > 64) return nullptr;
  const bool v2 = strcmp(symbol, "cuGetProcAddress") == 0 ? cuda_version >= 12000 : cuda_version >= 3020;
  for (const char* suffix : {(flags & 2) ? "_ptsz" : nullptr, v2 ? "_v2" : nullptr, ""}) {
    if (!suffix) continue;
    char name[80];
    snprintf(name, sizeof(name), "%s%s", symbol, suffix);
    for (const HookEntry& h : g_hooks) {
      if (h.name && strcmp(h.name, name) == 0) return h.hook;
    }
  }
  return nullptr;
}

CUresult SwapForHook(CUresult r, const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  if (r == CUDA_SUCCESS && pfn && *pfn && GetSettings().active) {
    if (void* hook = HookForLookup(symbol, *pfn, cuda_version, flags)) *pfn = hook;
  }
  return r;
}

// A fork's child owns none of its parent's slots or allocations.
void AfterForkInChild() {
  g_mutex = new (std::nothrow) std::mutex;
  for (CardHandle& c : g_cards) {
    c.slot = -1;
    if (c.status.load() == 1) c.status.store(0);
  }
  g_tracked = nullptr;
}

__attribute__((constructor)) void InitGuard() { pthread_atfork(nullptr, nullptr, AfterForkInChild); }

}  // namespace
}  // namespace mgpu::guard

using namespace mgpu::guard;

#define MGPU_REAL(name, ...) Real<decltype(&::name)>(k_##name)

// ---- the exported hooks

MGPU_EXPORT CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytes) {  // the 32-bit pointer ABI
  auto real = MGPU_REAL(cuMemAlloc);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(
      kPointer, -1, bytes, [&] { return real(dptr, bytes); }, [&] { return uint64_t{*dptr}; });
}

MGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  auto real = MGPU_REAL(cuMemAlloc_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(
      kPointer, -1, bytes, [&] { return real(dptr, bytes); }, [&] { return uint64_t{*dptr}; });
}

MGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                        unsigned int element_bytes) {
  auto real = MGPU_REAL(cuMemAllocPitch_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = ((width + 511) / 512) * 512 * height;  // rows padded to the pitch alignment
  return Allocate(
      kPointer, -1, bytes, [&] { return real(dptr, pitch, width, height, element_bytes); },
      [&] { return uint64_t{*dptr}; });
}

MGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  auto real = MGPU_REAL(cuMemAllocManaged);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(
      kPointer, -1, bytes, [&] { return real(dptr, bytes, flags); }, [&] { return uint64_t{*dptr}; });
}

#define MGPU_ALLOC_ASYNC(name)                                                                            \
  MGPU_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytes, CUstream stream) {                           \
    auto real = MGPU_REAL(name);                                                                          \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                                         \
    return Allocate(                                                                                      \
        kPointer, -1, bytes, [&] { return real(dptr, bytes, stream); }, [&] { return uint64_t{*dptr}; }); \
  }
MGPU_ALLOC_ASYNC(cuMemAllocAsync)
MGPU_ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define MGPU_ALLOC_POOL(name)                                                                      \
  MGPU_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) { \
    auto real = MGPU_REAL(name);                                                                   \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                                  \
    return Allocate(                                                                               \
        kPointer, -1, bytes, [&] { return real(dptr, bytes, pool, stream); },                      \
        [&] { return uint64_t{*dptr}; });                                                          \
  }
MGPU_ALLOC_POOL(cuMemAllocFromPoolAsync)
MGPU_ALLOC_POOL(cuMemAllocFromPoolAsync_ptsz)

MGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = MGPU_REAL(cuMemCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUdevice device = prop && prop->location.type == 1 ? prop->location.id : -1;
  return Allocate(
      kHandle, device, bytes, [&] { return real(handle, bytes, prop, flags); },
      [&] { return uint64_t{*handle}; });
}

MGPU_EXPORT CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto real = MGPU_REAL(cuArrayCreate_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = desc ? desc->Width * (desc->Height ? desc->Height : 1) *
                                    ArrayElementBytes(desc->Format, desc->NumChannels)
                              : 0;
  return Allocate(
      kArray, -1, bytes, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

uint64_t Array3DBytes(const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (!d) return 0;
  return d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) *
         ArrayElementBytes(d->Format, d->NumChannels);
}

MGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto real = MGPU_REAL(cuArray3DCreate_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(
      kArray, -1, Array3DBytes(desc), [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

MGPU_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                            unsigned int levels) {
  auto real = MGPU_REAL(cuMipmappedArrayCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = Array3DBytes(desc) * 4 / 3 + 1;  // the levels add at most a third
  (void)levels;
  return Allocate(
      kMipmapped, -1, bytes, [&] { return real(array, desc, levels); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

MGPU_EXPORT CUresult cuMemFree(unsigned int dptr) {
  auto real = MGPU_REAL(cuMemFree);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Free(kPointer, dptr, [&] { return real(dptr); });
}

MGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto real = MGPU_REAL(cuMemFree_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Free(kPointer, dptr, [&] { return real(dptr); });
}

#define MGPU_FREE_ASYNC(name)                                        \
  MGPU_EXPORT CUresult name(CUdeviceptr dptr, CUstream stream) {     \
    auto real = MGPU_REAL(name);                                     \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                    \
    return Free(kPointer, dptr, [&] { return real(dptr, stream); }); \
  }
MGPU_FREE_ASYNC(cuMemFreeAsync)
MGPU_FREE_ASYNC(cuMemFreeAsync_ptsz)

MGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = MGPU_REAL(cuMemRelease);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Free(kHandle, handle, [&] { return real(handle); });
}

MGPU_EXPORT CUresult cuArrayDestroy(CUarray array) {
  auto real = MGPU_REAL(cuArrayDestroy);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Free(kArray, reinterpret_cast<uint64_t>(array), [&] { return real(array); });
}

MGPU_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  auto real = MGPU_REAL(cuMipmappedArrayDestroy);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return Free(kMipmapped, reinterpret_cast<uint64_t>(array), [&] { return real(array); });
}

MGPU_EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  auto real = MGPU_REAL(cuMemGetInfo);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return MemInfo(free_bytes, total_bytes, [&] { return real(free_bytes, total_bytes); });
}

MGPU_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  auto real = MGPU_REAL(cuMemGetInfo_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return MemInfo(free_bytes, total_bytes, [&] { return real(free_bytes, total_bytes); });
}

#define MGPU_LAUNCH_KERNEL(name)                                                                           \
  MGPU_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                            unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {  \
    auto real = MGPU_REAL(name);                                                                           \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                                          \
    return Launch([&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });         \
  }
MGPU_LAUNCH_KERNEL(cuLaunchKernel)
MGPU_LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define MGPU_LAUNCH_EX(name)                                                                           \
  MGPU_EXPORT CUresult name(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) { \
    auto real = MGPU_REAL(name);                                                                       \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                                      \
    return Launch([&] { return real(config, f, params, extra); });                                     \
  }
MGPU_LAUNCH_EX(cuLaunchKernelEx)
MGPU_LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define MGPU_LAUNCH_COOPERATIVE(name)                                                                      \
  MGPU_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                            unsigned bz, unsigned shared, CUstream stream, void** params) {                \
    auto real = MGPU_REAL(name);                                                                           \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                                          \
    return Launch([&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params); });                \
  }
MGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
MGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define MGPU_GRAPH_LAUNCH(name)                                   \
  MGPU_EXPORT CUresult name(CUgraphExec graph, CUstream stream) { \
    auto real = MGPU_REAL(name);                                  \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                 \
    return Launch([&] { return real(graph, stream); });           \
  }
MGPU_GRAPH_LAUNCH(cuGraphLaunch)
MGPU_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

// The runtime's entry-point lookup: whatever version of a hooked function the driver answers, the answer
// is that function's hook.
MGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  auto real = MGPU_REAL(cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return SwapForHook(real(symbol, pfn, cuda_version, flags), symbol, pfn, cuda_version, flags);
}

MGPU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  auto real = MGPU_REAL(cuGetProcAddress_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return SwapForHook(real(symbol, pfn, cuda_version, flags, status), symbol, pfn, cuda_version, flags);
}

namespace mgpu::guard {
namespace {
// A "cu..." lookup: the hook when what the real dlsym found is one of the driver's hooked functions. The
// driver is loaded for this only when the symbol found is the driver's: other programs never get it.
__attribute__((noinline)) void* DlsymDriver(DlsymFn real, void* handle, const char* name) noexcept {
  void* found = real(handle, name);
  if (!found || !GetSettings().active) return found;
  Dl_info info{};
  if (dladdr(found, &info) == 0 || !info.dli_fname || !strstr(info.dli_fname, "libcuda.so")) return found;
  LoadDriver();
  if (void* hook = HookFor(found)) return hook;
  return found;
}
}  // namespace
}  // namespace mgpu::guard

// dlsym: a lookup that finds one of the driver's hooked functions gets the hook instead. Every other lookup
// is a tail call of the real dlsym (the guard is always built with sibling-call optimisation, and DlsymFn is
// noexcept so that nothing stands after the call), so that the caller it sees, which RTLD_NEXT is relative
// to, is the program's.
MGPU_EXPORT void* dlsym(void* handle, const char* name) noexcept {
  const DlsymFn real = RealDlsym();
  if (!real) return nullptr;
  if (handle != RTLD_NEXT && name[0] == 'c' && name[1] == 'u') return DlsymDriver(real, handle, name);
  return real(handle, name);
}

namespace mgpu::guard {
namespace {
void FillHooks() {
#define MGPU_FILL(name) g_hooks[k_##name] = HookEntry{#name, reinterpret_cast<void*>(&::name)};
  MGPU_GUARD_HOOKS(MGPU_FILL)
#undef MGPU_FILL
}
}  // namespace
}  // namespace mgpu::guard
