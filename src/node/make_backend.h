// Choosing the hardware backend by config, apart from the GpuBackend interface so that the interface's
// users never include both implementations.
#pragma once

#include <memory>

#include "common/config.h"
#include "common/result.h"
#include "node/gpu_backend.h"

namespace mgpu::node {

// The backend devicePlugin.gpuBackend names: static (the cards of devicePlugin.staticInventoryFile) or nvml.
Result<std::unique_ptr<GpuBackend>> MakeBackend(const DevicePluginConfig& config);

}  // namespace mgpu::node
