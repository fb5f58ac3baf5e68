// NVML as a program in the container sees it: the container's slice instead of the card. Frameworks size
// themselves from NVML (vLLM's gpu_memory_utilization, for one) and operators read nvidia-smi, so for a card
// the guard guards, the memory total is the cap and the used memory the container's own, the process lists
// hold the container's own processes, and the utilisation is the container's measured use. NVML is reached
// the ways the CUDA driver is: the exported hooks (a program linked against libnvidia-ml.so.1) and dlsym on
// the library (dlopen + dlsym, as nvidia-smi, pynvml and go-nvml do), each versioned name (_v2, _v3) with its
// own structure, and nvmlDeviceGetRunningProcessDetailList's list of any mode. Any other card, any failure,
// and a process outside mgpu get NVML's own answer.
#include <dlfcn.h>
#include <strings.h>

#include <cstring>
#include <type_traits>

#include "guard/guard_internal.h"

namespace mgpu::guard {
namespace {

enum NvmlHook : int {
#define MGPU_ENUM(name, ...) n_##name,
  MGPU_GUARD_NVML_HOOKS(MGPU_ENUM)
#undef MGPU_ENUM
      kNvmlHookCount
};
#define MGPU_NAME(name, ...) #name "\0"
constexpr char kNvmlHookNames[] = MGPU_GUARD_NVML_HOOKS(MGPU_NAME);
#undef MGPU_NAME

std::atomic<void*> g_nvml_real[kNvmlHookCount];
void* g_nvml_hooks[kNvmlHookCount];
using NvmlUuidFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
NvmlUuidFn g_nvml_uuid = nullptr;
std::once_flag g_nvml_once;
std::atomic<bool> g_nvml_loaded{false};

void LoadNvml() {
  if (g_nvml_loaded.load(std::memory_order_acquire)) return;
  Once(g_nvml_once, [] {
#define MGPU_FILL(name, ...) g_nvml_hooks[n_##name] = reinterpret_cast<void*>(&::name);
    MGPU_GUARD_NVML_HOOKS(MGPU_FILL)
#undef MGPU_FILL
    DlsymFn sym = RealDlsym();
    void* lib = sym ? dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!lib) return;
    const char* name = kNvmlHookNames;
    for (int i = 0; i < kNvmlHookCount; ++i, name += strlen(name) + 1) g_nvml_real[i].store(sym(lib, name));
    g_nvml_uuid = reinterpret_cast<NvmlUuidFn>(sym(lib, "nvmlDeviceGetUUID"));
  });
  g_nvml_loaded.store(true, std::memory_order_release);
}

template <typename Fn>
Fn RealNvml(NvmlHook hook) {
  LoadNvml();
  return reinterpret_cast<Fn>(g_nvml_real[hook].load(std::memory_order_relaxed));
}
#define MGPU_REAL_NVML(name) RealNvml<decltype(&::name)>(n_##name)

// The visible card index of NVML device `device`, or -1 (not the container's card, or not guarded).
int CardOfNvml(nvmlDevice_t device) {
  static nvmlDevice_t known[kMaxCards];  // under g_mutex: NVML queries are not hot
  static int known_card[kMaxCards];
  static int known_count = 0;
  const Settings& s = GetSettings();
  if (!s.active || !device) return -1;
  LoadNvml();
  std::lock_guard<std::mutex> hold(*g_mutex);
  for (int i = 0; i < known_count; ++i) {
    if (known[i] == device) return known_card[i];
  }
  char uuid[kUuidBytes] = {};
  int card = -1;
  if (g_nvml_uuid && g_nvml_uuid(device, uuid, sizeof(uuid)) == NVML_SUCCESS) {
    for (int i = 0; i < s.card_count; ++i) {
      if (strcasecmp(uuid, s.cards[i]) == 0) card = i;
    }
  }
  if (known_count < kMaxCards) {
    known[known_count] = device;
    known_card[known_count++] = card;
  }
  return card;
}

// The container's view of `device`; false when NVML's own answer stands.
bool View(nvmlDevice_t device, SliceView& view) {
  const int card = CardOfNvml(device);
  return card >= 0 && ViewSlice(card, view);
}

// NVML's memory answer for `device` (`call`), made the container's slice when the guard guards that card.
template <typename Memory, typename Call>
nvmlReturn_t SliceMemory(nvmlDevice_t device, Memory* memory, Call call) {
  const nvmlReturn_t rc = call();
  try {
    SliceView v;
    if (rc != NVML_SUCCESS || !memory || !View(device, v)) return rc;
    const uint64_t left = v.used_bytes < v.cap_bytes ? v.cap_bytes - v.used_bytes : 0;
    memory->total = v.cap_bytes;
    memory->used = v.used_bytes;
    if (left < memory->free) memory->free = left;  // never more than the card really has free
    if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>)
      memory->reserved = 0;  // the driver's, not the container's
  } catch (...) {
  }
  return rc;
}

// The container's own processes on the card, from the guard's state (whatever pid namespace NVML's own list
// is in): its pid as the container sees it, the memory the guard counts for it.
template <typename Info, typename Call>
nvmlReturn_t OwnProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, Call call) {
  try {
    SliceView v;
    if (!count || !View(device, v)) return call();
    if (*count < v.processes || (!infos && v.processes > 0)) {
      *count = v.processes;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < v.processes; ++i) {
      Info info{};
      info.pid = static_cast<unsigned int>(v.pid[i]);
      info.usedGpuMemory = v.bytes[i];
      if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
        info.gpuInstanceId = NVML_VALUE_NOT_AVAILABLE;
        info.computeInstanceId = NVML_VALUE_NOT_AVAILABLE;
      }
      infos[i] = info;
    }
    *count = v.processes;
    return NVML_SUCCESS;
  } catch (...) {
    return call();
  }
}

// A list of other processes (graphics, MPS): none belong to the container as the guard sees it. (`infos`
// unused: the same arguments as OwnProcesses.)
template <typename Info, typename Call>
nvmlReturn_t NoProcesses(nvmlDevice_t device, unsigned int* count, Info* /*infos*/, Call call) {
  try {
    if (!count || CardOfNvml(device) < 0) return call();
    *count = 0;
    return NVML_SUCCESS;
  } catch (...) {
    return call();
  }
}

}  // namespace

// A "nvml..." lookup: the hook when what the real dlsym found is NVML's function of the same name.
__attribute__((noinline)) void* DlsymNvml(DlsymFn real, void* handle, const char* name) noexcept {
  void* found = real(handle, name);
  if (!found || !GetSettings().active) return found;
  Dl_info info{};
  if (dladdr(found, &info) == 0 || !info.dli_fname || !strstr(info.dli_fname, "libnvidia-ml.so"))
    return found;
  LoadNvml();
  const char* n = kNvmlHookNames;
  for (int i = 0; i < kNvmlHookCount; ++i, n += strlen(n) + 1) {
    if (strcmp(n, name) == 0) return g_nvml_hooks[i];
  }
  return found;
}

}  // namespace mgpu::guard

using namespace mgpu::guard;

#define MGPU_SLICE_MEMORY(name, Memory)                                       \
  MGPU_EXPORT nvmlReturn_t name(nvmlDevice_t device, Memory* memory) {        \
    auto real = MGPU_REAL_NVML(name);                                         \
    if (!real) return NVML_ERROR_UNINITIALIZED;                               \
    return SliceMemory(device, memory, [&] { return real(device, memory); }); \
  }
MGPU_SLICE_MEMORY(nvmlDeviceGetMemoryInfo, nvmlMemory_t)
MGPU_SLICE_MEMORY(nvmlDeviceGetMemoryInfo_v2, nvmlMemory_v2_t)
#undef MGPU_SLICE_MEMORY

// NVML's process lists, answered by `Answer` (OwnProcesses or NoProcesses) with NVML's own list to fall back
// on.
#define MGPU_PROCESSES(name, Info, Answer)                                               \
  MGPU_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int* count, Info* infos) { \
    auto real = MGPU_REAL_NVML(name);                                                    \
    if (!real) return NVML_ERROR_UNINITIALIZED;                                          \
    return Answer(device, count, infos, [&] { return real(device, count, infos); });     \
  }
MGPU_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, OwnProcesses)
MGPU_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, OwnProcesses)
MGPU_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, OwnProcesses)
MGPU_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, NoProcesses)
MGPU_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, NoProcesses)
MGPU_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t, NoProcesses)
MGPU_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, NoProcesses)
MGPU_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, NoProcesses)
MGPU_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, NoProcesses)
#undef MGPU_PROCESSES

// One list for every kind of process (NVML of driver 550 and later; a likely source of nvidia-smi's process
// table, which listed the whole card in a container on driver 580): the container's own as its compute
// processes, none of the others. A version the guard does not know gets NVML's own answer.
MGPU_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                               nvmlProcessDetailList_t* list) {
  auto real = MGPU_REAL_NVML(nvmlDeviceGetRunningProcessDetailList);
  if (!real) return NVML_ERROR_UNINITIALIZED;
  const auto call = [&] { return real(device, list); };
  if (!list || list->version != nvmlProcessDetailList_v1) return call();
  if (list->mode == NVML_PROCESS_MODE_COMPUTE)
    return OwnProcesses(device, &list->numProcArrayEntries, list->procArray, call);
  return NoProcesses(device, &list->numProcArrayEntries, list->procArray, call);
}

MGPU_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  auto real = MGPU_REAL_NVML(nvmlDeviceGetUtilizationRates);
  if (!real) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t rc = real(device, utilization);
  try {
    // The container's measured SM use when the guards measured it in the last second; else the card's
    // (under native-burst-share nothing measures it).
    SliceView v;
    if (rc == NVML_SUCCESS && utilization && View(device, v) && v.util_known)
      utilization->gpu = v.util_percent;
  } catch (...) {
  }
  return rc;
}

MGPU_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned int* count, unsigned long long since) {
  auto real = MGPU_REAL_NVML(nvmlDeviceGetProcessUtilization);
  if (!real) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t rc = real(device, samples, count, since);
  try {
    // Only the container's own processes' samples (matched by pid; none where the pid namespace hides them).
    SliceView v;
    if (rc != NVML_SUCCESS || !samples || !count || !View(device, v)) return rc;
    unsigned kept = 0;
    for (unsigned i = 0; i < *count; ++i) {
      for (unsigned p = 0; p < v.processes; ++p) {
        if (samples[i].pid == static_cast<unsigned>(v.pid[p])) {
          samples[kept++] = samples[i];
          break;
        }
      }
    }
    *count = kept;
    return kept ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
  } catch (...) {
  }
  return rc;
}
