// The guard's test program: links the (fake) driver, runs the commands on its command line in order and
// prints one line per result, so that a test can run it under the guard as one process of a container.
//   path direct|dlsym|getproc|getproc2   how the driver functions are found (before any other command)
//   alloc|managed|async|pool|create|legacy <MiB>   allocate; prints "<command> <CUresult>"
//   pitch <width> <height>, array <width> <height>, array3d|mipmap <width> <height> <depth>
//   free <n>   frees the n-th allocation made (any kind); prints "free <CUresult>"
//   info       prints "info <free MiB> <total MiB>"
//   launch|launch-ex|coop|graph <count>   prints "launched <count> <last CUresult>"
//   launch-until <file>   launches until the file exists; prints "launched <count> <last CUresult>"
//   device <n>  makes device n current (the fake driver's FAKE_CUDA_DEVICE)
//   layers      prints "layers <n>": what two libraries stacked by dlsym(RTLD_NEXT) answer (11 when right)
//   touch <file>, wait <file>   synchronise with the test
//   fork-alloc <MiB>   a forked child (no exec) allocates, prints "child alloc <CUresult>" and exits unfreed
//   die        exits at once, freeing nothing; kill: dies of SIGKILL
#include <dlfcn.h>
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
};

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
  const auto launch_once = [&](const std::string& how) {
    if (how == "launch-ex") return api.launch_ex(nullptr, nullptr, nullptr, nullptr);
    if (how == "coop") return api.launch_coop(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr);
    if (how == "graph") return api.graph_launch(nullptr, nullptr);
    return api.launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
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
        Resolve(api, [&](const char* name) {
          void* p = nullptr;
          CUdriverProcAddressQueryResult status = 0;
          const CUresult r = how == "getproc" ? cuGetProcAddress(name, &p, 12000, 0)
                                              : cuGetProcAddress_v2(name, &p, 12000, 0, &status);
          return r == CUDA_SUCCESS ? p : nullptr;
        });
      }
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
    } else if (cmd == "launch" || cmd == "launch-ex" || cmd == "coop" || cmd == "graph") {
      const uint64_t n = num();
      CUresult r = 0;
      for (uint64_t k = 0; k < n; ++k) {
        r = launch_once(cmd);
        usleep(500);
      }
      printf("launched %llu %d\n", static_cast<unsigned long long>(n), r);
    } else if (cmd == "launch-until") {
      const char* file = arg();
      uint64_t n = 0;
      CUresult r = 0;
      while (!Exists(file)) {
        r = launch_once("launch");
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
