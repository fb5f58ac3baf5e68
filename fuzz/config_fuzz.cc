// The YAML configuration file of both daemons.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)mgpu::ParseConfig({reinterpret_cast<const char*>(data), size}, "fuzz");
  return 0;
}
