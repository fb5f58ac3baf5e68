#include "node/environment.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

namespace mgpu::node {
namespace {

std::string NewContainerToken() {
  std::random_device entropy;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", entropy());
    token += part;
  }
  return token;
}

void AddPreload(const std::string& library, std::vector<ContainerMount>& mounts) {
  mounts.push_back({library, library, true});
  mounts.push_back({"/etc/ld.so.preload", PreloadHostPath(library), true});
}

}  // namespace

std::string PreloadHostPath(const std::string& library_path) {
  return (std::filesystem::path(library_path).parent_path() / "ld.so.preload").string();
}

std::string PreloadContent(const std::string& library_path) { return library_path + "\n"; }

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
      AddPreload(isolation.hami_library_path, out.mounts);
      break;
    case IsolationBackend::kMgpu:
      // The guard reads the variables above; the state of each card is shared by every container on it.
      env["MGPU_GUARD_STATE_DIR"] = isolation.guard_state_directory;
      if (!core) env["MGPU_CONTAINER_TOKEN"] = NewContainerToken();
      AddPreload(isolation.guard_library_path, out.mounts);
      for (const Card& c : allocation.cards) {
        const std::string dir = isolation.guard_state_directory + "/" + c.uuid;
        out.mounts.push_back({dir, dir, false});
      }
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

ContainerEnvironment BuildContainerEnvironment(const std::vector<Card>& cards, Resource core_resource,
                                               int64_t core_per_card, int64_t memory_per_card_mib,
                                               const IsolationConfig& isolation, ComputePolicy compute_policy,
                                               const std::string& container_token) {
  ContainerEnvironment merged;
  for (const auto& [resource, amount] :
       {std::pair{core_resource, core_per_card}, {Resource::kMemory, memory_per_card_mib}}) {
    ContainerEnvironment one =
        BuildEnvironment(ResourceAllocation{resource, cards, amount}, isolation, compute_policy);
    merged.envs.insert(one.envs.begin(), one.envs.end());  // an existing key keeps its first value
    for (ContainerMount& m : one.mounts) {
      const bool seen = std::any_of(merged.mounts.begin(), merged.mounts.end(), [&](const ContainerMount& k) {
        return k.container_path == m.container_path;
      });
      if (!seen) merged.mounts.push_back(std::move(m));
    }
  }
  if (!container_token.empty() && merged.envs.count("MGPU_CONTAINER_TOKEN"))
    merged.envs["MGPU_CONTAINER_TOKEN"] = container_token;
  return merged;
}

}  // namespace mgpu::node
