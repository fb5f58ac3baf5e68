// The few CUDA driver API and NVML types the guard, its fake driver and its fake NVML use, declared here so
// that nothing needs NVIDIA's headers or libraries at build time. Values and layouts follow the public
// cuda.h / nvml.h of CUDA 12 and 13; only the fields read are named.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // 64-bit device pointer
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUfunction = struct CUfunc_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUarray = struct CUarray_st*;
using CUmipmappedArray = struct CUmipmappedArray_st*;
using CUmemoryPool = struct CUmemPoolHandle_st*;
using CUmemGenericAllocationHandle = unsigned long long;
using cuuint64_t = uint64_t;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEVICE_UNAVAILABLE = 46;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;

struct CUuuid {
  char bytes[16];
};

// CUmemAllocationProp: only the location (the device ordinal the memory lives on) is read.
struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};
struct CUmemAllocationProp {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};

// Array descriptors: the size estimate reads the extent, the format and the channel count.
struct CUDA_ARRAY_DESCRIPTOR {
  size_t Width;
  size_t Height;
  int Format;  // CUarray_format
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

// The CUDA 2.x descriptors of cuArrayCreate and cuArray3DCreate (the unversioned, 32-bit entry points).
struct CUDA_ARRAY_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  int Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

struct CUlaunchConfig;      // cuLaunchKernelEx's configuration: passed through, never read
struct CUDA_LAUNCH_PARAMS;  // cuLaunchCooperativeKernelMultiDevice's: passed through, never read
using CUdriverProcAddressQueryResult = int;

// NVML (libnvidia-ml.so.1).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
inline constexpr unsigned int NVML_VALUE_NOT_AVAILABLE = 0xffffffff;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
// nvmlProcessInfo_v2_t, also what the _v3 process lists fill (nvml.h's nvmlProcessInfo_t).
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
// nvmlDeviceGetRunningProcessDetailList's list (version 1, NVML of driver 550 and later): one mode's
// processes.
struct nvmlProcessDetail_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
struct nvmlProcessDetailList_v1_t {
  unsigned int version;  // nvmlProcessDetailList_v1
  unsigned int mode;     // NVML_PROCESS_MODE_*
  unsigned int numProcArrayEntries;
  nvmlProcessDetail_v1_t* procArray;
};
using nvmlProcessDetailList_t = nvmlProcessDetailList_v1_t;
inline constexpr unsigned int nvmlProcessDetailList_v1 = sizeof(nvmlProcessDetailList_v1_t) | (1u << 24);
inline constexpr unsigned int NVML_PROCESS_MODE_COMPUTE = 0;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  // microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

}  // extern "C"

namespace mgpu::guard {

// Bytes per element of a CUarray_format (CU_AD_FORMAT_*), times `channels`; 4 bytes for formats not listed.
inline size_t ArrayElementBytes(int format, unsigned channels) {
  size_t bytes = 4;
  switch (format) {
    case 0x01:
    case 0x08:
      bytes = 1;
      break;  // UNSIGNED_INT8, SIGNED_INT8
    case 0x02:
    case 0x09:
    case 0x10:
      bytes = 2;
      break;  // UNSIGNED_INT16, SIGNED_INT16, HALF
    case 0x03:
    case 0x0a:
    case 0x20:
      bytes = 4;
      break;  // UNSIGNED_INT32, SIGNED_INT32, FLOAT
    default:
      break;
  }
  return bytes * (channels == 0 ? 1 : channels);
}

}  // namespace mgpu::guard
