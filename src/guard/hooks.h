// Every driver entry point libmgpu-guard.so hooks, as X-macro lists: one list per kind of hook, each entry
// the function's name, its parameters and (where the hook is generated) how they are passed on. The lists
// declare the hooks' prototypes (so a definition that drifts from its entry does not compile), build the
// table that dlsym and cuGetProcAddress answer from (driver.cc), and generate the hooks that only forward
// around a rule (launches, frees). Adding a launch path is one line here.
#pragma once

#include "guard/cuda_api.h"

// clang-format off

// Allocations, each with its own size rule (memory.cc). X(name, parameters)
#define MGPU_GUARD_ALLOC_HOOKS(X)                                                                            \
  X(cuMemAlloc, (unsigned int* dptr, unsigned int bytes))                                                    \
  X(cuMemAlloc_v2, (CUdeviceptr* dptr, size_t bytes))                                                        \
  X(cuMemAllocPitch_v2, (CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,                      \
                         unsigned int element_bytes))                                                        \
  X(cuMemAllocManaged, (CUdeviceptr* dptr, size_t bytes, unsigned int flags))                                \
  X(cuMemAllocAsync, (CUdeviceptr* dptr, size_t bytes, CUstream stream))                                     \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr* dptr, size_t bytes, CUstream stream))                                \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream))          \
  X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream))     \
  X(cuMemCreate, (CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,       \
                  unsigned long long flags))                                                                 \
  X(cuArrayCreate_v2, (CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc))                                   \
  X(cuArray3DCreate_v2, (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc))                               \
  X(cuMipmappedArrayCreate, (CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,                   \
                             unsigned int levels))                                                           \
  X(cuMemAllocPitch, (unsigned int* dptr, unsigned int* pitch, unsigned int width, unsigned int height,      \
                      unsigned int element_bytes))                                                           \
  X(cuArrayCreate, (CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc))                                   \
  X(cuArray3DCreate, (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc))

// Frees: the allocation kind and key they release, then the call. X(name, parameters, kind, key, arguments)
#define MGPU_GUARD_FREE_HOOKS(X)                                                                             \
  X(cuMemFree, (unsigned int dptr), kPointer, dptr, (dptr))                                                  \
  X(cuMemFree_v2, (CUdeviceptr dptr), kPointer, dptr, (dptr))                                                \
  X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream), kPointer, dptr, (dptr, stream))                     \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream stream), kPointer, dptr, (dptr, stream))                \
  X(cuMemRelease, (CUmemGenericAllocationHandle handle), kHandle, handle, (handle))                          \
  X(cuArrayDestroy, (CUarray array), kArray, reinterpret_cast<uint64_t>(array), (array))                     \
  X(cuMipmappedArrayDestroy, (CUmipmappedArray array), kMipmapped, reinterpret_cast<uint64_t>(array), (array))

// What the container sees of its memory. X(name, parameters)
#define MGPU_GUARD_INFO_HOOKS(X)                                                                             \
  X(cuMemGetInfo, (unsigned int* free_bytes, unsigned int* total_bytes))                                     \
  X(cuMemGetInfo_v2, (size_t* free_bytes, size_t* total_bytes))

// Work sent to the card: each passes the launch rules (compute.cc) first. X(name, parameters, arguments)
#define MGPU_GUARD_LAUNCH_HOOKS(X)                                                                           \
  X(cuLaunchKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
                     unsigned bz, unsigned shared, CUstream stream, void** params, void** extra),            \
    (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))                                              \
  X(cuLaunchKernel_ptsz, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,     \
                          unsigned bz, unsigned shared, CUstream stream, void** params, void** extra),       \
    (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))                                              \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),             \
    (config, f, params, extra))                                                                              \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),        \
    (config, f, params, extra))                                                                              \
  X(cuLaunchCooperativeKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,            \
                                unsigned by, unsigned bz, unsigned shared, CUstream stream, void** params),  \
    (f, gx, gy, gz, bx, by, bz, shared, stream, params))                                                     \
  X(cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,       \
                                     unsigned by, unsigned bz, unsigned shared, CUstream stream,             \
                                     void** params),                                                         \
    (f, gx, gy, gz, bx, by, bz, shared, stream, params))                                                     \
  X(cuGraphLaunch, (CUgraphExec graph, CUstream stream), (graph, stream))                                    \
  X(cuGraphLaunch_ptsz, (CUgraphExec graph, CUstream stream), (graph, stream))                               \
  X(cuGraphUpload, (CUgraphExec graph, CUstream stream), (graph, stream))                                    \
  X(cuGraphUpload_ptsz, (CUgraphExec graph, CUstream stream), (graph, stream))                               \
  X(cuLaunchCooperativeKernelMultiDevice, (CUDA_LAUNCH_PARAMS* list, unsigned devices, unsigned flags),      \
    (list, devices, flags))                                                                                  \
  X(cuLaunch, (CUfunction f), (f))                                                                           \
  X(cuLaunchGrid, (CUfunction f, int width, int height), (f, width, height))                                 \
  X(cuLaunchGridAsync, (CUfunction f, int width, int height, CUstream stream), (f, width, height, stream))

// The runtime's entry-point lookup (driver.cc). X(name, parameters)
#define MGPU_GUARD_LOOKUP_HOOKS(X)                                                                           \
  X(cuGetProcAddress, (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags))                  \
  X(cuGetProcAddress_v2, (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                \
                          CUdriverProcAddressQueryResult* status))

// NVML, as a program in the container sees it: its slice's memory and its own processes and use (nvml.cc).
// X(name, parameters)
#define MGPU_GUARD_NVML_HOOKS(X)                                                                             \
  X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t* memory))                                    \
  X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t* memory))                              \
  X(nvmlDeviceGetComputeRunningProcesses, (nvmlDevice_t device, unsigned int* count,                         \
                                           nvmlProcessInfo_v1_t* infos))                                     \
  X(nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t device, unsigned int* count,                      \
                                              nvmlProcessInfo_v2_t* infos))                                  \
  X(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t device, unsigned int* count,                      \
                                              nvmlProcessInfo_v2_t* infos))                                  \
  X(nvmlDeviceGetGraphicsRunningProcesses, (nvmlDevice_t device, unsigned int* count,                        \
                                            nvmlProcessInfo_v1_t* infos))                                    \
  X(nvmlDeviceGetGraphicsRunningProcesses_v2, (nvmlDevice_t device, unsigned int* count,                     \
                                               nvmlProcessInfo_v2_t* infos))                                 \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3, (nvmlDevice_t device, unsigned int* count,                     \
                                               nvmlProcessInfo_v2_t* infos))                                 \
  X(nvmlDeviceGetMPSComputeRunningProcesses, (nvmlDevice_t device, unsigned int* count,                      \
                                              nvmlProcessInfo_v1_t* infos))                                  \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v2, (nvmlDevice_t device, unsigned int* count,                   \
                                                 nvmlProcessInfo_v2_t* infos))                               \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v3, (nvmlDevice_t device, unsigned int* count,                   \
                                                 nvmlProcessInfo_v2_t* infos))                               \
  X(nvmlDeviceGetRunningProcessDetailList, (nvmlDevice_t device, nvmlProcessDetailList_t* list))             \
  X(nvmlDeviceGetUtilizationRates, (nvmlDevice_t device, nvmlUtilization_t* utilization))                    \
  X(nvmlDeviceGetProcessUtilization, (nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples,          \
                                      unsigned int* count, unsigned long long since))

// All of the driver's: X is called with the name first (and whatever else the entry carries).
#define MGPU_GUARD_HOOKS(X)                                                                                  \
  MGPU_GUARD_ALLOC_HOOKS(X) MGPU_GUARD_FREE_HOOKS(X) MGPU_GUARD_INFO_HOOKS(X) MGPU_GUARD_LAUNCH_HOOKS(X)     \
  MGPU_GUARD_LOOKUP_HOOKS(X)

// clang-format on

#define MGPU_GUARD_DECLARE(name, parameters, ...) extern "C" CUresult name parameters;
MGPU_GUARD_HOOKS(MGPU_GUARD_DECLARE)
#undef MGPU_GUARD_DECLARE
#define MGPU_GUARD_DECLARE(name, parameters) extern "C" nvmlReturn_t name parameters;
MGPU_GUARD_NVML_HOOKS(MGPU_GUARD_DECLARE)
#undef MGPU_GUARD_DECLARE
