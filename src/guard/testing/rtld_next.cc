// Two test libraries for the guard's dlsym (built twice, RTLD_NEXT_LAYER = 1 and 2): layer 1's
// mgpu_test_layers() adds itself to what dlsym(RTLD_NEXT) finds after it, which must be layer 2 (as it is
// without the guard); were "next" taken relative to the guard, layer 1 would find itself again.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) int mgpu_test_layers() {
#if RTLD_NEXT_LAYER == 1
  static thread_local int depth = 0;
  if (depth > 0) return 1000;  // found itself: the lookup was not relative to this library
  ++depth;
  auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "mgpu_test_layers"));
  const int below = next ? next() : 0;
  --depth;
  return 10 + below;
#else
  return 1;
#endif
}
