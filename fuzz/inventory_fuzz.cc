// D/gpu-inventory (a node annotation anyone with node-patch rights can write). Property: what decodes
// encodes back to the same.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/codec.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mgpu::Result<mgpu::NodeInventory> inventory =
      mgpu::DecodeInventory({reinterpret_cast<const char*>(data), size});
  if (!inventory.ok()) return 0;
  const mgpu::Result<mgpu::NodeInventory> again = mgpu::DecodeInventory(mgpu::EncodeInventory(*inventory));
  MGPU_FUZZ_CHECK(again.ok() && *again == *inventory);
  return 0;
}
