// kube-scheduler's ExtenderArgs body (filter, prioritize) through parsing, both verbs and the reply.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "extender/wire.h"
#include "extender_world.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mgpu::extender;
  mgpu::Result<ExtenderArgs> args =
      ExtenderArgs::Parse({reinterpret_cast<const char*>(data), size}, mgpu::fuzz::World().extender.Reader());
  if (!args.ok()) {
    (void)EncodeError(args.message());
    return 0;
  }
  Extender& extender = mgpu::fuzz::World().extender;
  (void)EncodeFilterResult(*args, extender.Filter(*args));
  (void)EncodePrioritizeResult(extender.Prioritize(*args));
  return 0;
}
