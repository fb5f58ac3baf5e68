// kube-scheduler's ExtenderPreemptionArgs body through parsing, the preempt verb and the reply.
#include <cstddef>
#include <cstdint>

#include "extender/wire.h"
#include "extender_world.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mgpu::extender;
  mgpu::Result<PreemptArgs> args =
      PreemptArgs::Parse({reinterpret_cast<const char*>(data), size}, mgpu::fuzz::World().extender.Reader());
  if (!args.ok()) {
    (void)EncodeError(args.message());
    return 0;
  }
  (void)EncodePreemptResult(mgpu::fuzz::World().extender.Preempt(*args));
  return 0;
}
