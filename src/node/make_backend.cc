#include "node/make_backend.h"

#include "node/nvml_backend.h"
#include "node/static_backend.h"

namespace mgpu::node {

Result<std::unique_ptr<GpuBackend>> MakeBackend(const DevicePluginConfig& config) {
  if (config.gpu_backend == "static") {
    auto b = StaticBackend::Load(config.static_inventory_file);
    if (!b.ok()) return b.error();
    return std::unique_ptr<GpuBackend>(std::move(*b));
  }
  auto b = NvmlBackend::Open();
  if (!b.ok()) return b.error();
  return std::unique_ptr<GpuBackend>(std::move(*b));
}

}  // namespace mgpu::node
