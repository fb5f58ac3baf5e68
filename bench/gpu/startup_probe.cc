// One process's start on a GPU, timed, for bench/gpu/guard_on_gpu.sh's startup figure: cuInit, the primary
// context, a 1 MiB allocation (where the guard attaches to the card's state) and the launch of an empty CUDA
// graph (where, under a compute share, it loads NVML). Prints the milliseconds it took, or "error <step>
// <rc>". The driver is reached by dlopen + dlsym, as the CUDA runtime does; no NVIDIA header is needed to
// build it.
#include <dlfcn.h>

#include <chrono>
#include <cstddef>
#include <cstdio>

using CUresult = int;

template <typename F>
F Sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

#define STEP(fn, ...)                              \
  do {                                             \
    const CUresult rc = fn ? fn(__VA_ARGS__) : -1; \
    if (rc != 0) {                                 \
      printf("error %s %d\n", #fn, rc);            \
      return 1;                                    \
    }                                              \
  } while (0)

int main() {
  const auto start = std::chrono::steady_clock::now();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("error dlopen -1\n");
    return 1;
  }
  auto cuInit = Sym<CUresult (*)(unsigned)>(lib, "cuInit");
  auto cuDeviceGet = Sym<CUresult (*)(int*, int)>(lib, "cuDeviceGet");
  auto cuDevicePrimaryCtxRetain = Sym<CUresult (*)(void**, int)>(lib, "cuDevicePrimaryCtxRetain");
  auto cuCtxSetCurrent = Sym<CUresult (*)(void*)>(lib, "cuCtxSetCurrent");
  auto cuMemAlloc_v2 = Sym<CUresult (*)(unsigned long long*, size_t)>(lib, "cuMemAlloc_v2");
  auto cuGraphCreate = Sym<CUresult (*)(void**, unsigned)>(lib, "cuGraphCreate");
  auto cuGraphInstantiateWithFlags =
      Sym<CUresult (*)(void**, void*, unsigned long long)>(lib, "cuGraphInstantiateWithFlags");
  auto cuGraphLaunch = Sym<CUresult (*)(void*, void*)>(lib, "cuGraphLaunch");
  auto cuCtxSynchronize = Sym<CUresult (*)()>(lib, "cuCtxSynchronize");
  auto cuMemFree_v2 = Sym<CUresult (*)(unsigned long long)>(lib, "cuMemFree_v2");
  int device = 0;
  void* context = nullptr;
  unsigned long long memory = 0;
  void* graph = nullptr;
  void* exec = nullptr;
  STEP(cuInit, 0u);
  STEP(cuDeviceGet, &device, 0);
  STEP(cuDevicePrimaryCtxRetain, &context, device);
  STEP(cuCtxSetCurrent, context);
  STEP(cuMemAlloc_v2, &memory, size_t{1} << 20);
  STEP(cuGraphCreate, &graph, 0u);
  STEP(cuGraphInstantiateWithFlags, &exec, graph, 0ULL);
  STEP(cuGraphLaunch, exec, nullptr);
  STEP(cuCtxSynchronize);
  STEP(cuMemFree_v2, memory);
  printf("%.1f\n",
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return 0;
}
