// The memory cap: the live device allocations of all the container's processes on a card stay within
// MGPU_MEMORY_MIB. An allocation takes its bytes from the container's cap first (under the card lock, across
// processes), the driver's answer settles it, and the free gives them back; cuMemGetInfo reports the slice.
#include <unordered_map>

#include "guard/guard_internal.h"

namespace mgpu::guard {
namespace {

struct Tracked {
  int card;
  uint64_t bytes;
};
enum Kind { kPointer, kHandle, kArray, kMipmapped, kKindCount };
std::unordered_map<uint64_t, Tracked>* g_tracked = nullptr;  // [kKindCount], under g_mutex

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

uint64_t Array3DBytes(const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (!d) return 0;
  return d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) *
         ArrayElementBytes(d->Format, d->NumChannels);
}

}  // namespace

void ForgetAllocationsInChild() { g_tracked = nullptr; }

}  // namespace mgpu::guard

using namespace mgpu::guard;

// ---- allocations (MGPU_GUARD_ALLOC_HOOKS)

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
  return Allocate(
      kMipmapped, -1, bytes, [&] { return real(array, desc, levels); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

// The CUDA 2.x entry points (32-bit sizes and pointers), still exported by the driver for old binaries.

MGPU_EXPORT CUresult cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width,
                                     unsigned int height, unsigned int element_bytes) {
  auto real = MGPU_REAL(cuMemAllocPitch);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = ((uint64_t{width} + 511) / 512) * 512 * height;
  return Allocate(
      kPointer, -1, bytes, [&] { return real(dptr, pitch, width, height, element_bytes); },
      [&] { return uint64_t{*dptr}; });
}

MGPU_EXPORT CUresult cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  auto real = MGPU_REAL(cuArrayCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = desc ? uint64_t{desc->Width} * (desc->Height ? desc->Height : 1) *
                                    ArrayElementBytes(desc->Format, desc->NumChannels)
                              : 0;
  return Allocate(
      kArray, -1, bytes, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

MGPU_EXPORT CUresult cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  auto real = MGPU_REAL(cuArray3DCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const uint64_t bytes = desc ? uint64_t{desc->Width} * (desc->Height ? desc->Height : 1) *
                                    (desc->Depth ? desc->Depth : 1) *
                                    ArrayElementBytes(desc->Format, desc->NumChannels)
                              : 0;
  return Allocate(
      kArray, -1, bytes, [&] { return real(array, desc); },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

// ---- frees (MGPU_GUARD_FREE_HOOKS)

#define MGPU_FREE(name, parameters, kind, key, arguments)   \
  MGPU_EXPORT CUresult name parameters {                    \
    auto real = MGPU_REAL(name);                            \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;           \
    return Free(kind, key, [&] { return real arguments; }); \
  }
MGPU_GUARD_FREE_HOOKS(MGPU_FREE)
#undef MGPU_FREE

// ---- what the container sees (MGPU_GUARD_INFO_HOOKS)

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
