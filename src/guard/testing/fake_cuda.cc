// A fake libcuda.so.1 for the guard's tests: the functions the guard hooks or calls, with made-up device
// addresses (no memory behind them), a memory total, counters, and a launch log. Configured by the
// environment: FAKE_CUDA_UUIDS (comma-separated card UUIDs, one device each), FAKE_CUDA_DEVICE (the current
// device), FAKE_CUDA_TOTAL_MIB (memory per device, default 81920), FAKE_CUDA_LOST (a file: while it exists
// the card is gone, launches and cuCtxGetDevice fail), FAKE_CUDA_LOG (a file each launch appends
// "launch <FAKE_CUDA_TAG> <CLOCK_MONOTONIC ns>" to). cuGetProcAddress answers as a CUDA 12 or 13 driver does:
// a base name gets its newest version not newer than the version asked for (cuMemAlloc -> cuMemAlloc_v2 from
// 3.2, cuGetProcAddress -> cuGetProcAddress_v2 from 12.0), and the per-thread-stream form (_ptsz) with
// flag 2.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "guard/cuda_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mutex;
std::unordered_map<uint64_t, uint64_t> g_live;  // address -> bytes
unsigned long long g_next = 0x10000000ULL;      // below 4 GiB, for the 32-bit legacy calls too
uint64_t g_live_bytes = 0;
std::atomic<uint64_t> g_launches{0};

uint64_t TotalBytes() {
  const char* t = getenv("FAKE_CUDA_TOTAL_MIB");
  return (t ? strtoull(t, nullptr, 10) : 81920) << 20;
}

CUresult Take(uint64_t bytes, unsigned long long* out) {
  std::lock_guard<std::mutex> hold(g_mutex);
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_live_bytes + bytes > TotalBytes()) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = g_next;
  g_next += (bytes + 0xfff) & ~uint64_t{0xfff};
  g_live[*out] = bytes;
  g_live_bytes += bytes;
  return CUDA_SUCCESS;
}

CUresult Give(uint64_t address) {
  std::lock_guard<std::mutex> hold(g_mutex);
  auto it = g_live.find(address);
  if (it == g_live.end()) return CUDA_ERROR_INVALID_VALUE;
  g_live_bytes -= it->second;
  g_live.erase(it);
  return CUDA_SUCCESS;
}

// FAKE_CUDA_LOST: a file whose existence means the card fell off the bus.
bool Lost() {
  const char* lost = getenv("FAKE_CUDA_LOST");
  return lost && access(lost, F_OK) == 0;
}

CUresult Launched() {
  if (Lost()) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  ++g_launches;
  if (const char* log = getenv("FAKE_CUDA_LOG")) {
    const char* tag = getenv("FAKE_CUDA_TAG");
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    char line[128];
    const int n = snprintf(line, sizeof(line), "launch %s %lld\n", tag ? tag : "-",
                           static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
    const int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (write(fd, line, static_cast<size_t>(n)) < 0) perror("fake cuda log");
      close(fd);
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_EXPORT CUresult cuInit(unsigned) { return CUDA_SUCCESS; }

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (Lost()) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  const char* d = getenv("FAKE_CUDA_DEVICE");
  *device = d ? atoi(d) : 0;
  return CUDA_SUCCESS;
}

// What a program's start needs (bench/gpu/startup_probe.cc runs over this driver too).
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  *device = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  static int primary;
  *context = reinterpret_cast<CUcontext>(&primary);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuGraphCreate(void** graph, unsigned) {
  static int empty;
  *graph = &empty;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, void* graph, unsigned long long) {
  *exec = reinterpret_cast<CUgraphExec>(graph);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  const char* list = getenv("FAKE_CUDA_UUIDS");
  if (!list) return CUDA_ERROR_INVALID_VALUE;
  std::string all(list);
  size_t start = 0;
  for (int i = 0; i < device; ++i) {
    start = all.find(',', start);
    if (start == std::string::npos) return CUDA_ERROR_INVALID_VALUE;
    ++start;
  }
  std::string hex;
  for (size_t i = start + 4; i < all.size() && all[i] != ','; ++i) {
    if (all[i] != '-') hex += all[i];
  }
  if (hex.size() != 32) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < 16; ++i)
    uuid->bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytes) {
  unsigned long long a = 0;
  const CUresult r = Take(bytes, &a);
  if (r == CUDA_SUCCESS) *dptr = static_cast<unsigned int>(a);
  return r;
}
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) { return Take(bytes, dptr); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                        unsigned) {
  *pitch = (width + 511) / 512 * 512;
  return Take(*pitch * height, dptr);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned) {
  return Take(bytes, dptr);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream) { return Take(bytes, dptr); }
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream) {
  return Take(bytes, dptr);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool, CUstream) {
  return Take(bytes, dptr);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool, CUstream) {
  return Take(bytes, dptr);
}
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                 const CUmemAllocationProp*, unsigned long long) {
  return Take(bytes, handle);
}
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* d) {
  unsigned long long a = 0;
  const CUresult r =
      Take(d->Width * d->Height * mgpu::guard::ArrayElementBytes(d->Format, d->NumChannels), &a);
  *array = reinterpret_cast<CUarray>(a);
  return r;
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  unsigned long long a = 0;
  const CUresult r =
      Take(d->Width * d->Height * d->Depth * mgpu::guard::ArrayElementBytes(d->Format, d->NumChannels), &a);
  *array = reinterpret_cast<CUarray>(a);
  return r;
}
FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                            unsigned) {
  unsigned long long a = 0;
  const CUresult r =
      Take(d->Width * d->Height * d->Depth * mgpu::guard::ArrayElementBytes(d->Format, d->NumChannels), &a);
  *array = reinterpret_cast<CUmipmappedArray>(a);
  return r;
}
FAKE_EXPORT CUresult cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width,
                                     unsigned int height, unsigned) {
  *pitch = (width + 511) / 512 * 512;
  unsigned long long a = 0;
  const CUresult r = Take(uint64_t{*pitch} * height, &a);
  if (r == CUDA_SUCCESS) *dptr = static_cast<unsigned int>(a);
  return r;
}
FAKE_EXPORT CUresult cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* d) {
  unsigned long long a = 0;
  const CUresult r =
      Take(uint64_t{d->Width} * d->Height * mgpu::guard::ArrayElementBytes(d->Format, d->NumChannels), &a);
  *array = reinterpret_cast<CUarray>(a);
  return r;
}
FAKE_EXPORT CUresult cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* d) {
  unsigned long long a = 0;
  const CUresult r = Take(
      uint64_t{d->Width} * d->Height * d->Depth * mgpu::guard::ArrayElementBytes(d->Format, d->NumChannels),
      &a);
  *array = reinterpret_cast<CUarray>(a);
  return r;
}
FAKE_EXPORT CUresult cuMemFree(unsigned int dptr) { return Give(dptr); }
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return Give(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return Give(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return Give(dptr); }
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return Give(handle); }
FAKE_EXPORT CUresult cuArrayDestroy(CUarray array) { return Give(reinterpret_cast<uint64_t>(array)); }
FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  return Give(reinterpret_cast<uint64_t>(array));
}
FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> hold(g_mutex);
  *total_bytes = TotalBytes();
  *free_bytes = *total_bytes - g_live_bytes;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  *free_bytes = static_cast<unsigned>(f);
  *total_bytes = static_cast<unsigned>(t);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                         unsigned, unsigned, CUstream, void**, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig*, CUfunction, void**, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, unsigned, CUstream, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                                    unsigned, unsigned, unsigned, CUstream, void**) {
  return Launched();
}
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec, CUstream) { return Launched(); }
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream) { return Launched(); }
FAKE_EXPORT CUresult cuGraphUpload(CUgraphExec, CUstream) { return Launched(); }
FAKE_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec, CUstream) { return Launched(); }
FAKE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS*, unsigned, unsigned) {
  return Launched();
}
FAKE_EXPORT CUresult cuLaunch(CUfunction) { return Launched(); }
FAKE_EXPORT CUresult cuLaunchGrid(CUfunction, int, int) { return Launched(); }
FAKE_EXPORT CUresult cuLaunchGridAsync(CUfunction, int, int, CUstream) { return Launched(); }

FAKE_EXPORT uint64_t fakeCudaLiveBytes() { return g_live_bytes; }
FAKE_EXPORT uint64_t fakeCudaLaunches() { return g_launches; }

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags);
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status);

namespace {

// With FAKE_CUDA_PROC_INTERNAL set, cuGetProcAddress answers these with entry points the library does not
// export (as a driver may), so only the guard's lookup by name can catch them.
CUresult InternalMemAlloc(CUdeviceptr* dptr, size_t bytes) { return Take(bytes, dptr); }
CUresult InternalMemFree(CUdeviceptr dptr) { return Give(dptr); }

// Like the real driver: a base name answers its newest version not newer than `cuda_version`, and with flag 2
// its per-thread-stream form where there is one.
void* Lookup(const char* symbol, int cuda_version, cuuint64_t flags) {
  if (getenv("FAKE_CUDA_PROC_INTERNAL") && cuda_version >= 3020) {
    if (strcmp(symbol, "cuMemAlloc") == 0) return reinterpret_cast<void*>(&InternalMemAlloc);
    if (strcmp(symbol, "cuMemFree") == 0) return reinterpret_cast<void*>(&InternalMemFree);
  }
  static const std::unordered_map<std::string, void*> table = {
#define F(name) {#name, reinterpret_cast<void*>(&name)}
      F(cuInit),
      F(cuCtxGetDevice),
      F(cuDeviceGetUuid),
      F(cuMemAlloc),
      F(cuMemAlloc_v2),
      F(cuMemAllocPitch),
      F(cuMemAllocPitch_v2),
      F(cuMemAllocManaged),
      F(cuMemAllocAsync),
      F(cuMemAllocAsync_ptsz),
      F(cuMemAllocFromPoolAsync),
      F(cuMemAllocFromPoolAsync_ptsz),
      F(cuMemCreate),
      F(cuArrayCreate),
      F(cuArrayCreate_v2),
      F(cuArray3DCreate),
      F(cuArray3DCreate_v2),
      F(cuMipmappedArrayCreate),
      F(cuMemFree),
      F(cuMemFree_v2),
      F(cuMemFreeAsync),
      F(cuMemFreeAsync_ptsz),
      F(cuMemRelease),
      F(cuArrayDestroy),
      F(cuMipmappedArrayDestroy),
      F(cuMemGetInfo),
      F(cuMemGetInfo_v2),
      F(cuLaunchKernel),
      F(cuLaunchKernel_ptsz),
      F(cuLaunchKernelEx),
      F(cuLaunchKernelEx_ptsz),
      F(cuLaunchCooperativeKernel),
      F(cuLaunchCooperativeKernel_ptsz),
      F(cuLaunchCooperativeKernelMultiDevice),
      F(cuGraphLaunch),
      F(cuGraphLaunch_ptsz),
      F(cuGraphUpload),
      F(cuGraphUpload_ptsz),
      F(cuLaunch),
      F(cuLaunchGrid),
      F(cuLaunchGridAsync),
      F(cuGetProcAddress),
      F(cuGetProcAddress_v2),
#undef F
  };
  const std::string name(symbol);
  const bool v2 = name == "cuGetProcAddress" ? cuda_version >= 12000 : cuda_version >= 3020;
  for (const std::string& candidate :
       {(flags & 2) ? name + "_ptsz" : std::string(), v2 ? name + "_v2" : std::string(), name}) {
    if (candidate.empty()) continue;
    auto it = table.find(candidate);
    if (it != table.end()) return it->second;
  }
  return nullptr;
}

}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  *pfn = Lookup(symbol, cuda_version, flags);
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  const CUresult r = cuGetProcAddress(symbol, pfn, cuda_version, flags);
  if (status) *status = r == CUDA_SUCCESS ? 0 : 1;
  return r;
}
