// D/gpu-assignment and D/gpu-allocated (one format) and D/gpu-assume-time, pod annotations. Property: what
// decodes encodes back to the same.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/codec.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const mgpu::Result<mgpu::Assignment> assignment = mgpu::DecodeAssignment(text);
  if (assignment.ok()) {
    const mgpu::Result<mgpu::Assignment> again = mgpu::DecodeAssignment(mgpu::EncodeAssignment(*assignment));
    MGPU_FUZZ_CHECK(again.ok() && *again == *assignment);
  }
  const mgpu::Result<int64_t> assume = mgpu::DecodeAssumeTime(text);
  if (assume.ok()) {
    const mgpu::Result<int64_t> again = mgpu::DecodeAssumeTime(mgpu::EncodeAssumeTime(*assume));
    MGPU_FUZZ_CHECK(again.ok() && *again == *assume);
  }
  return 0;
}
