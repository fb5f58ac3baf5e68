#include "deviceplugin/environment.h"

#include <filesystem>

namespace mgpu::dp {

std::string HamiPreloadHostPath(const IsolationConfig& isolation) {
  return (std::filesystem::path(isolation.hami_library_path).parent_path() / "ld.so.preload").string();
}

std::string HamiPreloadContent(const IsolationConfig& isolation) {
  return isolation.hami_library_path + "\n";
}

ContainerEnvironment BuildEnvironment(const ResourceAllocation& allocation, const IsolationConfig& isolation,
                                      ComputePolicy compute_policy) {
  ContainerEnvironment out;
  auto& env = out.envs;
  std::string uuids;
  for (const Card& c : allocation.cards) uuids += (uuids.empty() ? "" : ",") + c.uuid;
  env["NVIDIA_VISIBLE_DEVICES"] = uuids;
  env["MGPU_VISIBLE_CARDS"] = uuids;
  const std::string amount = std::to_string(allocation.per_card);
  const bool core = allocation.resource != Resource::kMemory;
  if (core) {
    const bool online = allocation.resource == Resource::kCore;
    env[online ? "MGPU_CORE_PERCENT" : "MGPU_RECLAIMED_CORE_PERCENT"] = amount;
    env["MGPU_QOS_LEVEL"] = std::string(Name(online ? Qos::kOnline : Qos::kOffline));
    env["MGPU_COMPUTE_POLICY"] = std::string(Name(compute_policy));
  } else {
    env["MGPU_MEMORY_MIB"] = amount;
  }

  switch (isolation.backend) {
    case IsolationBackend::kNone:
      break;
    case IsolationBackend::kHamiCore:
      if (core) {
        env["CUDA_DEVICE_SM_LIMIT"] = amount;
      } else {
        for (size_t i = 0; i < allocation.cards.size(); ++i)
          env["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = amount + "m";
      }
      out.mounts.push_back({isolation.hami_library_path, isolation.hami_library_path, true});
      out.mounts.push_back({"/etc/ld.so.preload", HamiPreloadHostPath(isolation), true});
      break;
    case IsolationBackend::kMps:
      if (core) {
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = amount;
      } else {
        std::string limits;
        for (size_t i = 0; i < allocation.cards.size(); ++i)
          limits += (i ? "," : "") + std::to_string(i) + "=" + amount + "M";
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = limits;
      }
      env["CUDA_MPS_PIPE_DIRECTORY"] = isolation.mps_pipe_directory;
      // Clients create their own pipes there: not read-only.
      out.mounts.push_back({isolation.mps_pipe_directory, isolation.mps_pipe_directory, false});
      break;
  }
  return out;
}

}  // namespace mgpu::dp
