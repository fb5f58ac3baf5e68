// The guard's test program: links the (fake) driver and NVML, runs the commands on its command line in order
// and prints one line per result, so that a test can run it under the guard as one process of a container.
//   path direct|dlsym   how the driver functions are found (before any other command); or
//   path getproc|getproc2 <cudaVersion> <flags>   through cuGetProcAddress (4 arguments) or _v2 (5)
//   hooked dlsym|getproc|getproc2 <cudaVersion> <flags>   prints "<base name> guard|driver|missing" for every
//              entry point the guard hooks, as found that way
//   alloc|managed|async|pool|create|legacy <MiB>   allocate; prints "<command> <CUresult>"
//   pitch <width> <height>, array <width> <height>, array3d|mipmap <width> <height> <depth>
//   legacy-pitch <width> <height>, legacy-array <width> <height>, legacy-array3d <width> <height> <depth>:
//              the CUDA 2.x entry points
//   free <n>   frees the n-th allocation made (any kind); prints "free <CUresult>"
//   info       prints "info <free MiB> <total MiB>"
//   launch|launch-ex|coop|coop-multi|graph|graph-upload|legacy-launch|launch-grid|launch-grid-async <count>
//              prints "launched <count> <last CUresult>"
//   launch-until <file>   launches until the file exists; prints "launched <count> <last CUresult>"
//   until <how> <file>    the same with any of the launches above"
//   nvml direct|dlsym   how NVML is found (direct: linked; dlsym: dlopen + dlsym, as nvidia-smi)
//   nvml-mem|nvml-mem2   prints "nvml-mem <total MiB> <used MiB> <free MiB> <nvmlReturn_t>"
//   nvml-procs v1|v2|v3|detail, nvml-gprocs, nvml-detail <mode>   prints "procs <count> <pid>:<MiB>...
//              <nvmlReturn_t>" (detail: nvmlDeviceGetRunningProcessDetailList, of compute processes or of
//              NVML_PROCESS_MODE_* <mode>)
//   nvml-util   prints "util <gpu percent> <nvmlReturn_t>"
//   lock-card <state file> <file>   takes the card lock of that state, touches the file, waits to be killed"
//   device <n>  makes device n current (the fake driver's FAKE_CUDA_DEVICE)
//   layers      prints "layers <n>": what two libraries stacked by dlsym(RTLD_NEXT) answer (11 when right)
//   touch <file>, wait <file>   synchronise with the test
//   fork-alloc <MiB>   a forked child (no exec) allocates, prints "child alloc <CUresult>" and exits unfreed
//   die        exits at once, freeing nothing; kill: dies of SIGKILL
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "guard/cuda_api.h"

extern "C" {
CUresult cuMemAlloc(unsigned int*, unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
CUresult cuArrayCreate_v2(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
CUresult cuArray3DCreate_v2(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
CUresult cuMipmappedArrayCreate(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
CUresult cuMemFree(unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        CUstream, void**, void**);
CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
CUresult cuMemAllocPitch(unsigned int*, unsigned int*, unsigned int, unsigned int, unsigned int);
CUresult cuArrayCreate(CUarray*, const CUDA_ARRAY_DESCRIPTOR_v1*);
CUresult cuArray3DCreate(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR_v1*);
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS*, unsigned, unsigned);
CUresult cuGraphUpload(CUgraphExec, CUstream);
CUresult cuLaunch(CUfunction);
CUresult cuLaunchGrid(CUfunction, int, int);
CUresult cuLaunchGridAsync(CUfunction, int, int, CUstream);
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t*);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v1_t*);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t*);
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t, nvmlProcessDetailList_t*);
int mgpu_test_layers();
}

namespace {

struct Api {
  decltype(&cuMemAlloc) mem_alloc_legacy = &cuMemAlloc;
  decltype(&cuMemAlloc_v2) mem_alloc = &cuMemAlloc_v2;
  decltype(&cuMemAllocPitch_v2) mem_alloc_pitch = &cuMemAllocPitch_v2;
  decltype(&cuMemAllocManaged) mem_alloc_managed = &cuMemAllocManaged;
  decltype(&cuMemAllocAsync) mem_alloc_async = &cuMemAllocAsync;
  decltype(&cuMemAllocFromPoolAsync) mem_alloc_pool = &cuMemAllocFromPoolAsync;
  decltype(&cuMemCreate) mem_create = &cuMemCreate;
  decltype(&cuArrayCreate_v2) array_create = &cuArrayCreate_v2;
  decltype(&cuArray3DCreate_v2) array3d_create = &cuArray3DCreate_v2;
  decltype(&cuMipmappedArrayCreate) mipmap_create = &cuMipmappedArrayCreate;
  decltype(&cuMemFree) mem_free_legacy = &cuMemFree;
  decltype(&cuMemFree_v2) mem_free = &cuMemFree_v2;
  decltype(&cuMemFreeAsync) mem_free_async = &cuMemFreeAsync;
  decltype(&cuMemRelease) mem_release = &cuMemRelease;
  decltype(&cuArrayDestroy) array_destroy = &cuArrayDestroy;
  decltype(&cuMipmappedArrayDestroy) mipmap_destroy = &cuMipmappedArrayDestroy;
  decltype(&cuMemGetInfo_v2) mem_get_info = &cuMemGetInfo_v2;
  decltype(&cuLaunchKernel) launch = &cuLaunchKernel;
  decltype(&cuLaunchKernelEx) launch_ex = &cuLaunchKernelEx;
  decltype(&cuLaunchCooperativeKernel) launch_coop = &cuLaunchCooperativeKernel;
  decltype(&cuGraphLaunch) graph_launch = &cuGraphLaunch;
  decltype(&cuMemAllocPitch) mem_alloc_pitch_legacy = &cuMemAllocPitch;
  decltype(&cuArrayCreate) array_create_legacy = &cuArrayCreate;
  decltype(&cuArray3DCreate) array3d_create_legacy = &cuArray3DCreate;
  decltype(&cuLaunchCooperativeKernelMultiDevice) launch_coop_multi = &cuLaunchCooperativeKernelMultiDevice;
  decltype(&cuGraphUpload) graph_upload = &cuGraphUpload;
  decltype(&cuLaunch) launch_legacy = &cuLaunch;
  decltype(&cuLaunchGrid) launch_grid = &cuLaunchGrid;
  decltype(&cuLaunchGridAsync) launch_grid_async = &cuLaunchGridAsync;
};

struct Nvml {
  decltype(&nvmlInit_v2) init = &nvmlInit_v2;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle = &nvmlDeviceGetHandleByIndex_v2;
  decltype(&nvmlDeviceGetMemoryInfo) mem = &nvmlDeviceGetMemoryInfo;
  decltype(&nvmlDeviceGetMemoryInfo_v2) mem2 = &nvmlDeviceGetMemoryInfo_v2;
  decltype(&nvmlDeviceGetComputeRunningProcesses) procs1 = &nvmlDeviceGetComputeRunningProcesses;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v2) procs2 = &nvmlDeviceGetComputeRunningProcesses_v2;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) procs3 = &nvmlDeviceGetComputeRunningProcesses_v3;
  decltype(&nvmlDeviceGetGraphicsRunningProcesses_v3) gprocs = &nvmlDeviceGetGraphicsRunningProcesses_v3;
  decltype(&nvmlDeviceGetUtilizationRates) util = &nvmlDeviceGetUtilizationRates;
  decltype(&nvmlDeviceGetRunningProcessDetailList) detail = &nvmlDeviceGetRunningProcessDetailList;
};

// The base names the CUDA runtime asks cuGetProcAddress for, of every entry point the guard hooks.
const char* const kHookedBaseNames[] = {"cuMemAlloc",
                                        "cuMemAllocPitch",
                                        "cuMemAllocManaged",
                                        "cuMemAllocAsync",
                                        "cuMemAllocFromPoolAsync",
                                        "cuMemCreate",
                                        "cuArrayCreate",
                                        "cuArray3DCreate",
                                        "cuMipmappedArrayCreate",
                                        "cuMemFree",
                                        "cuMemFreeAsync",
                                        "cuMemRelease",
                                        "cuArrayDestroy",
                                        "cuMipmappedArrayDestroy",
                                        "cuMemGetInfo",
                                        "cuLaunchKernel",
                                        "cuLaunchKernelEx",
                                        "cuLaunchCooperativeKernel",
                                        "cuLaunchCooperativeKernelMultiDevice",
                                        "cuGraphLaunch",
                                        "cuGraphUpload",
                                        "cuLaunch",
                                        "cuLaunchGrid",
                                        "cuLaunchGridAsync",
                                        "cuGetProcAddress"};

// Where `p` lives: "guard" (libmgpu-guard.so), "driver", or "missing".
const char* Owner(void* p) {
  if (!p) return "missing";
  Dl_info info{};
  if (dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "mgpu-guard")) return "guard";
  return "driver";
}

// Resolves every entry of `api` by name with `find` (base names, as the CUDA runtime asks).
template <typename Find>
void Resolve(Api& api, Find find) {
  const auto set = [&](auto& fn, const char* name) {
    void* p = find(name);
    if (!p) {
      fprintf(stderr, "probe: %s not found\n", name);
      exit(3);
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  set(api.mem_alloc, "cuMemAlloc");
  set(api.mem_alloc_pitch, "cuMemAllocPitch");
  set(api.mem_alloc_managed, "cuMemAllocManaged");
  set(api.mem_alloc_async, "cuMemAllocAsync");
  set(api.mem_alloc_pool, "cuMemAllocFromPoolAsync");
  set(api.mem_create, "cuMemCreate");
  set(api.array_create, "cuArrayCreate");
  set(api.array3d_create, "cuArray3DCreate");
  set(api.mipmap_create, "cuMipmappedArrayCreate");
  set(api.mem_free, "cuMemFree");
  set(api.mem_free_async, "cuMemFreeAsync");
  set(api.mem_release, "cuMemRelease");
  set(api.array_destroy, "cuArrayDestroy");
  set(api.mipmap_destroy, "cuMipmappedArrayDestroy");
  set(api.mem_get_info, "cuMemGetInfo");
  set(api.launch, "cuLaunchKernel");
  set(api.launch_ex, "cuLaunchKernelEx");
  set(api.launch_coop, "cuLaunchCooperativeKernel");
  set(api.graph_launch, "cuGraphLaunch");
  set(api.launch_coop_multi, "cuLaunchCooperativeKernelMultiDevice");
  set(api.graph_upload, "cuGraphUpload");
  set(api.launch_legacy, "cuLaunch");
  set(api.launch_grid, "cuLaunchGrid");
  set(api.launch_grid_async, "cuLaunchGridAsync");
}

// cuGetProcAddress (`how`: getproc or getproc2) for `name`.
void* GetProc(const std::string& how, const char* name, int version, cuuint64_t flags) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = 0;
  const CUresult r = how == "getproc" ? cuGetProcAddress(name, &p, version, flags)
                                      : cuGetProcAddress_v2(name, &p, version, flags, &status);
  return r == CUDA_SUCCESS ? p : nullptr;
}

// dlsym of the name a program linked against CUDA `version`'s cuda.h calls for `base`.
void* DlsymVersioned(void* driver, const std::string& base, int version, cuuint64_t flags) {
  const bool v2 = base == "cuGetProcAddress" ? version >= 12000 : version >= 3020;
  for (const std::string& name :
       {(flags & 2) ? base + "_ptsz" : std::string(), v2 ? base + "_v2" : std::string(), base}) {
    if (name.empty()) continue;
    if (void* p = dlsym(driver, name.c_str())) return p;
  }
  return nullptr;
}

struct Allocation {
  std::string kind;
  uint64_t value;
};

bool Exists(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Api api;
  std::vector<Allocation> made;
  Nvml nvml;
  nvmlDevice_t nvml_device = nullptr;
  const auto launch_once = [&](const std::string& how) {
    if (how == "launch-ex") return api.launch_ex(nullptr, nullptr, nullptr, nullptr);
    if (how == "coop") return api.launch_coop(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr);
    if (how == "coop-multi") return api.launch_coop_multi(nullptr, 1, 0);
    if (how == "graph") return api.graph_launch(nullptr, nullptr);
    if (how == "graph-upload") return api.graph_upload(nullptr, nullptr);
    if (how == "legacy-launch") return api.launch_legacy(nullptr);
    if (how == "launch-grid") return api.launch_grid(nullptr, 1, 1);
    if (how == "launch-grid-async") return api.launch_grid_async(nullptr, 1, 1, nullptr);
    return api.launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  };
  const auto nvml_device_of = [&] {
    if (!nvml_device) {
      nvml.init();
      nvml.handle(0, &nvml_device);
    }
    return nvml_device;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string cmd = argv[i];
    const auto arg = [&]() -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "probe: %s needs an argument\n", cmd.c_str());
        exit(2);
      }
      return argv[++i];
    };
    const auto num = [&] { return strtoull(arg(), nullptr, 10); };
    if (cmd == "path") {
      const std::string how = arg();
      if (how == "dlsym") {
        void* h = dlopen("libcuda.so.1", RTLD_NOW);
        Resolve(api, [&](const char* name) {
          const std::string n(name);
          const bool v2 = n == "cuMemAlloc" || n == "cuMemAllocPitch" || n == "cuArrayCreate" ||
                          n == "cuArray3DCreate" || n == "cuMemFree" || n == "cuMemGetInfo";
          return dlsym(h, (n + (v2 ? "_v2" : "")).c_str());
        });
      } else if (how == "getproc" || how == "getproc2") {
        const int version = static_cast<int>(num());
        const cuuint64_t flags = num();
        Resolve(api, [&](const char* name) { return GetProc(how, name, version, flags); });
      }
    } else if (cmd == "hooked") {
      const std::string how = arg();
      const int version = static_cast<int>(num());
      const cuuint64_t flags = num();
      void* driver = dlopen("libcuda.so.1", RTLD_NOW);
      for (const char* name : kHookedBaseNames) {
        void* p = how == "dlsym" ? DlsymVersioned(driver, name, version, flags)
                                 : GetProc(how, name, version, flags);
        printf("%s %s\n", name, Owner(p));
      }
    } else if (cmd == "nvml") {
      if (std::string(arg()) == "dlsym") {
        void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        const auto set = [&](auto& fn, const char* name) {
          fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
          if (!fn) {
            fprintf(stderr, "probe: %s not found\n", name);
            exit(3);
          }
        };
        set(nvml.init, "nvmlInit_v2");
        set(nvml.handle, "nvmlDeviceGetHandleByIndex_v2");
        set(nvml.mem, "nvmlDeviceGetMemoryInfo");
        set(nvml.mem2, "nvmlDeviceGetMemoryInfo_v2");
        set(nvml.procs1, "nvmlDeviceGetComputeRunningProcesses");
        set(nvml.procs2, "nvmlDeviceGetComputeRunningProcesses_v2");
        set(nvml.procs3, "nvmlDeviceGetComputeRunningProcesses_v3");
        set(nvml.gprocs, "nvmlDeviceGetGraphicsRunningProcesses_v3");
        set(nvml.util, "nvmlDeviceGetUtilizationRates");
        set(nvml.detail, "nvmlDeviceGetRunningProcessDetailList");
      }
    } else if (cmd == "nvml-mem" || cmd == "nvml-mem2") {
      unsigned long long total = 0, used = 0, free_bytes = 0;
      nvmlReturn_t r = 0;
      if (cmd == "nvml-mem") {
        nvmlMemory_t m{};
        r = nvml.mem(nvml_device_of(), &m);
        total = m.total, used = m.used, free_bytes = m.free;
      } else {
        nvmlMemory_v2_t m{};
        m.version = static_cast<unsigned>(sizeof(m)) | (2u << 24);
        r = nvml.mem2(nvml_device_of(), &m);
        total = m.total, used = m.used, free_bytes = m.free;
      }
      printf("%s %llu %llu %llu %d\n", cmd.c_str(), total >> 20, used >> 20, free_bytes >> 20, r);
    } else if (cmd == "nvml-procs" || cmd == "nvml-gprocs" || cmd == "nvml-detail") {
      const std::string version = cmd == "nvml-procs" ? arg() : cmd == "nvml-detail" ? "detail" : "v3";
      const unsigned mode =
          cmd == "nvml-detail" ? static_cast<unsigned>(atoi(arg())) : NVML_PROCESS_MODE_COMPUTE;
      unsigned count = 0;
      nvmlProcessInfo_v1_t one[64];
      nvmlProcessInfo_v2_t two[64];
      nvmlProcessDetail_v1_t details[64];
      const auto call = [&](unsigned* n, bool buffers) {
        if (version == "detail") {
          nvmlProcessDetailList_t list{nvmlProcessDetailList_v1, mode, *n, buffers ? details : nullptr};
          const nvmlReturn_t r = nvml.detail(nvml_device_of(), &list);
          for (unsigned i = 0; buffers && i < list.numProcArrayEntries && i < 64; ++i)
            two[i] = {details[i].pid, details[i].usedGpuMemory, 0, 0};
          *n = list.numProcArrayEntries;
          return r;
        }
        if (cmd == "nvml-gprocs") return nvml.gprocs(nvml_device_of(), n, buffers ? two : nullptr);
        if (version == "v1") return nvml.procs1(nvml_device_of(), n, buffers ? one : nullptr);
        if (version == "v2") return nvml.procs2(nvml_device_of(), n, buffers ? two : nullptr);
        return nvml.procs3(nvml_device_of(), n, buffers ? two : nullptr);
      };
      nvmlReturn_t r = call(&count, false);  // how many, as callers ask first
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) r = call(&count, true);
      std::string line = "procs " + std::to_string(count);
      for (unsigned i = 0; i < count && i < 64; ++i) {
        const unsigned pid = version == "v1" && cmd == "nvml-procs" ? one[i].pid : two[i].pid;
        const unsigned long long bytes =
            version == "v1" && cmd == "nvml-procs" ? one[i].usedGpuMemory : two[i].usedGpuMemory;
        line += " " + std::to_string(pid) + ":" + std::to_string(bytes >> 20);
      }
      printf("%s %d\n", line.c_str(), r);
    } else if (cmd == "nvml-util") {
      nvmlUtilization_t u{};
      const nvmlReturn_t r = nvml.util(nvml_device_of(), &u);
      printf("util %u %d\n", u.gpu, r);
    } else if (cmd == "lock-card") {
      const int fd = open(arg(), O_RDWR);
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      lock.l_start = 1 << 20;  // state.h's kLockBase: the card lock
      lock.l_len = 1;
      if (fd < 0 || fcntl(fd, F_SETLKW, &lock) != 0) return 4;
      FILE* f = fopen(arg(), "w");
      if (f) fclose(f);
      pause();
    } else if (cmd == "alloc" || cmd == "managed" || cmd == "async" || cmd == "pool" || cmd == "legacy") {
      const uint64_t bytes = num() << 20;
      CUdeviceptr p = 0;
      unsigned int p32 = 0;
      CUresult r = 0;
      if (cmd == "alloc") r = api.mem_alloc(&p, bytes);
      if (cmd == "managed") r = api.mem_alloc_managed(&p, bytes, 1);
      if (cmd == "async") r = api.mem_alloc_async(&p, bytes, nullptr);
      if (cmd == "pool") r = api.mem_alloc_pool(&p, bytes, nullptr, nullptr);
      if (cmd == "legacy") {
        r = api.mem_alloc_legacy(&p32, static_cast<unsigned>(bytes));
        p = p32;
      }
      printf("%s %d\n", cmd.c_str(), r);
      made.push_back({r == CUDA_SUCCESS ? cmd : "failed", p});
    } else if (cmd == "create") {
      CUmemAllocationProp prop{};
      prop.location = {1, 0};
      CUmemGenericAllocationHandle h = 0;
      const CUresult r = api.mem_create(&h, num() << 20, &prop, 0);
      printf("create %d\n", r);
      made.push_back({r == CUDA_SUCCESS ? cmd : "failed", h});
    } else if (cmd == "legacy-pitch") {
      const unsigned w = static_cast<unsigned>(num()), h = static_cast<unsigned>(num());
      unsigned p = 0, pitch = 0;
      const CUresult r = api.mem_alloc_pitch_legacy(&p, &pitch, w, h, 4);
      printf("legacy-pitch %d\n", r);
      made.push_back({r == CUDA_SUCCESS ? "legacy" : "failed", p});
    } else if (cmd == "legacy-array" || cmd == "legacy-array3d") {
      CUarray a = nullptr;
      CUresult r = 0;
      if (cmd == "legacy-array") {
        CUDA_ARRAY_DESCRIPTOR_v1 d{static_cast<unsigned>(num()), static_cast<unsigned>(num()), 0x20, 1};
        r = api.array_create_legacy(&a, &d);
      } else {
        CUDA_ARRAY3D_DESCRIPTOR_v1 d{static_cast<unsigned>(num()),
                                     static_cast<unsigned>(num()),
                                     static_cast<unsigned>(num()),
                                     0x20,
                                     1,
                                     0};
        r = api.array3d_create_legacy(&a, &d);
      }
      printf("%s %d\n", cmd.c_str(), r);
      made.push_back({r == CUDA_SUCCESS ? "array" : "failed", reinterpret_cast<uint64_t>(a)});
    } else if (cmd == "pitch") {
      const size_t w = num(), h = num();
      CUdeviceptr p = 0;
      size_t pitch = 0;
      const CUresult r = api.mem_alloc_pitch(&p, &pitch, w, h, 4);
      printf("pitch %d\n", r);
      made.push_back({r == CUDA_SUCCESS ? cmd : "failed", p});
    } else if (cmd == "array") {
      CUDA_ARRAY_DESCRIPTOR d{num(), num(), 0x20, 1};
      CUarray a = nullptr;
      const CUresult r = api.array_create(&a, &d);
      printf("array %d\n", r);
      made.push_back({r == CUDA_SUCCESS ? cmd : "failed", reinterpret_cast<uint64_t>(a)});
    } else if (cmd == "array3d" || cmd == "mipmap") {
      CUDA_ARRAY3D_DESCRIPTOR d{num(), num(), num(), 0x20, 1, 0};
      CUresult r = 0;
      uint64_t v = 0;
      if (cmd == "array3d") {
        CUarray a = nullptr;
        r = api.array3d_create(&a, &d);
        v = reinterpret_cast<uint64_t>(a);
      } else {
        CUmipmappedArray a = nullptr;
        r = api.mipmap_create(&a, &d, 1);
        v = reinterpret_cast<uint64_t>(a);
      }
      printf("%s %d\n", cmd.c_str(), r);
      made.push_back({r == CUDA_SUCCESS ? cmd : "failed", v});
    } else if (cmd == "free") {
      const Allocation a = made.at(num());
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (a.kind == "alloc" || a.kind == "managed" || a.kind == "pitch") r = api.mem_free(a.value);
      if (a.kind == "async" || a.kind == "pool") r = api.mem_free_async(a.value, nullptr);
      if (a.kind == "legacy") r = api.mem_free_legacy(static_cast<unsigned>(a.value));
      if (a.kind == "create") r = api.mem_release(a.value);
      if (a.kind == "array" || a.kind == "array3d") r = api.array_destroy(reinterpret_cast<CUarray>(a.value));
      if (a.kind == "mipmap") r = api.mipmap_destroy(reinterpret_cast<CUmipmappedArray>(a.value));
      printf("free %d\n", r);
    } else if (cmd == "info") {
      size_t f = 0, t = 0;
      const CUresult r = api.mem_get_info(&f, &t);
      printf("info %zu %zu %d\n", f >> 20, t >> 20, r);
    } else if (cmd == "launch" || cmd == "launch-ex" || cmd == "coop" || cmd == "coop-multi" ||
               cmd == "graph" || cmd == "graph-upload" || cmd == "legacy-launch" || cmd == "launch-grid" ||
               cmd == "launch-grid-async") {
      const uint64_t n = num();
      CUresult r = 0;
      for (uint64_t k = 0; k < n; ++k) {
        r = launch_once(cmd);
        usleep(500);
      }
      printf("launched %llu %d\n", static_cast<unsigned long long>(n), r);
    } else if (cmd == "launch-until" || cmd == "until") {
      const std::string how = cmd == "until" ? arg() : "launch";
      const char* file = arg();
      uint64_t n = 0;
      CUresult r = 0;
      while (!Exists(file)) {
        r = launch_once(how);
        ++n;
        usleep(500);
      }
      printf("launched %llu %d\n", static_cast<unsigned long long>(n), r);
    } else if (cmd == "fork-alloc") {
      const uint64_t bytes = num() << 20;
      const pid_t child = fork();
      if (child == 0) {
        CUdeviceptr p = 0;
        printf("child alloc %d\n", api.mem_alloc(&p, bytes));
        fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(child, &status, 0);
    } else if (cmd == "layers") {
      printf("layers %d\n", mgpu_test_layers());
    } else if (cmd == "device") {
      setenv("FAKE_CUDA_DEVICE", arg(), 1);
    } else if (cmd == "touch") {
      FILE* f = fopen(arg(), "w");
      if (f) fclose(f);
    } else if (cmd == "wait") {
      const char* file = arg();
      for (int k = 0; k < 60000 && !Exists(file); ++k) usleep(1000);
    } else if (cmd == "die") {
      _exit(0);
    } else if (cmd == "kill") {
      raise(SIGKILL);
    } else {
      fprintf(stderr, "probe: unknown command %s\n", cmd.c_str());
      return 2;
    }
  }
  return 0;
}
