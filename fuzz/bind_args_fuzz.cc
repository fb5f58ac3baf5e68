// kube-scheduler's ExtenderBindingArgs body, and the reply to it.
#include <cstddef>
#include <cstdint>

#include "extender/wire.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mgpu::extender;
  mgpu::Result<BindArgs> args = BindArgs::Parse({reinterpret_cast<const char*>(data), size});
  if (!args.ok()) {
    MGPU_FUZZ_CHECK(!args.message().empty());
    (void)EncodeError(args.message());
    return 0;
  }
  MGPU_FUZZ_CHECK(!args->pod_name.empty() && !args->node.empty() && !args->pod_namespace.empty());
  return 0;
}
