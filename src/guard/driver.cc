// The real dlsym, the real driver and the hook table: a program that reaches the driver by dlopen + dlsym or
// through cuGetProcAddress(_v2), the CUDA runtime's entry-point lookup, gets the guard's hook of the function
// it asked for. The real driver is dlopen'ed at first use.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "guard/guard_internal.h"

namespace mgpu::guard {
namespace {

// The hooks' names, one after another in hook order (one string: no relocations to load), and their
// addresses (filled with the driver's).
#define MGPU_NAME(name, ...) #name "\0"
constexpr char kHookNames[] = MGPU_GUARD_HOOKS(MGPU_NAME);
#undef MGPU_NAME
void* g_hooks[kHookCount];

// The hook named `name`, or nullptr.
void* HookNamed(const char* name) {
  const char* n = kHookNames;
  for (int i = 0; i < kHookCount; ++i, n += strlen(n) + 1) {
    if (strcmp(n, name) == 0) return g_hooks[i];
  }
  return nullptr;
}

void* g_driver = nullptr;
std::once_flag g_driver_once;
std::atomic<bool> g_driver_loaded{false};

void* HookFor(void* real) {
  if (!real) return nullptr;
  for (int i = 0; i < kHookCount; ++i) {
    if (g_real[i].load(std::memory_order_relaxed) == real) return g_hooks[i];
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
    if (void* hook = HookNamed(name)) return hook;
  }
  return nullptr;
}

CUresult SwapForHook(CUresult r, const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  if (r == CUDA_SUCCESS && pfn && *pfn && GetSettings().active) {
    if (void* hook = HookForLookup(symbol, *pfn, cuda_version, flags)) *pfn = hook;
  }
  return r;
}

}  // namespace

std::atomic<void*> g_real[kHookCount];
CtxGetDeviceFn g_ctx_get_device = nullptr;
DeviceGetUuidFn g_device_get_uuid = nullptr;

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

void LoadDriver() {
  if (g_driver_loaded.load(std::memory_order_acquire)) return;
  Once(g_driver_once, [] {
#define MGPU_FILL(name, ...) g_hooks[k_##name] = reinterpret_cast<void*>(&::name);
    MGPU_GUARD_HOOKS(MGPU_FILL)
#undef MGPU_FILL
    DlsymFn sym = RealDlsym();
    if (!sym) return;
    g_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!g_driver) return;
    const char* name = kHookNames;
    for (int i = 0; i < kHookCount; ++i, name += strlen(name) + 1) g_real[i].store(sym(g_driver, name));
    g_ctx_get_device = reinterpret_cast<CtxGetDeviceFn>(sym(g_driver, "cuCtxGetDevice"));
    g_device_get_uuid = reinterpret_cast<DeviceGetUuidFn>(sym(g_driver, "cuDeviceGetUuid_v2"));
    if (!g_device_get_uuid)
      g_device_get_uuid = reinterpret_cast<DeviceGetUuidFn>(sym(g_driver, "cuDeviceGetUuid"));
  });
  g_driver_loaded.store(true, std::memory_order_release);
}

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

using namespace mgpu::guard;

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

// dlsym: a lookup that finds one of the driver's (or NVML's) hooked functions gets the hook instead. Every
// other lookup is a tail call of the real dlsym (the guard is always built with sibling-call optimisation,
// and DlsymFn is noexcept so that nothing stands after the call), so that the caller it sees, which RTLD_NEXT
// is relative to, is the program's.
MGPU_EXPORT void* dlsym(void* handle, const char* name) noexcept {
  const DlsymFn real = RealDlsym();
  if (!real) return nullptr;
  if (handle != RTLD_NEXT && name[0] == 'c' && name[1] == 'u') return DlsymDriver(real, handle, name);
  if (handle != RTLD_NEXT && name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')
    return DlsymNvml(real, handle, name);
  return real(handle, name);
}
