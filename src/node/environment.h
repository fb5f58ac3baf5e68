// What a container is handed for one resource's Allocate (DESIGN §6), and in the DRA mode for a claim (its
// CDI spec, docs/dra.md §5): environment and mounts derived only from the allocation (cards and per-card
// amount) and node config, plus, with the mgpu backend, a fresh random container token (below). No I/O.
//
// The kubelet calls Allocate once per resource and merges the responses (the first value of a variable wins,
// conflicts are only logged), so each resource sets only what its own IDs determine, and the variables two
// responses share (the visible cards, mounts) come out identical when both resources sit on the same cards:
//   every resource:      NVIDIA_VISIBLE_DEVICES, MGPU_VISIBLE_CARDS (card UUIDs by card index), the
//                        isolation backend's mounts, CUDA_MPS_PIPE_DIRECTORY (mps), MGPU_GUARD_STATE_DIR
//                        (mgpu)
//   mgpu-core:           MGPU_CORE_PERCENT, MGPU_QOS_LEVEL=online, MGPU_COMPUTE_POLICY,
//                        CUDA_DEVICE_SM_LIMIT (hami-core), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (mps)
//   reclaimed-mgpu-core: MGPU_RECLAIMED_CORE_PERCENT, MGPU_QOS_LEVEL=offline, and the same as mgpu-core
//   mgpu-memory:         MGPU_MEMORY_MIB, CUDA_DEVICE_MEMORY_LIMIT_<i> (hami-core),
//                        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (mps), MGPU_CONTAINER_TOKEN (mgpu)
// MGPU_CONTAINER_TOKEN is how the guard (src/guard) tells containers apart: the kubelet names no container
// at Allocate, so each mgpu-memory response carries a fresh random token (every mgpu container asks for
// mgpu-memory exactly once), and all processes of the container share the memory cap under it. It is the one
// value here that is not a function of the inputs.
// MGPU_COMPUTE_POLICY is the node's defaultComputePolicy: device IDs do not carry the pod's policy, and
// Allocate derives nothing from guesses about which pod it serves. The allocator keeps one policy per card,
// so a pod asking another policy never shares a card with default-policy pods; an isolation layer that
// needs the pod's own policy reads the pod's D/gpu-allocated annotation, else its D/gpu-assignment.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/model.h"

namespace mgpu::node {

// One container's allocation of one resource: what the device plugin reads from the IDs of an Allocate call
// (deviceplugin/devices.h), and each half of BuildContainerEnvironment's input.
struct ResourceAllocation {
  Resource resource = Resource::kCore;
  std::vector<Card> cards;  // by card index
  int64_t per_card = 0;     // percent (cores) or MiB (memory) on each card
};

struct ContainerMount {
  std::string container_path;
  std::string host_path;
  bool read_only = true;

  bool operator==(const ContainerMount&) const = default;
};

struct ContainerEnvironment {
  std::map<std::string, std::string> envs;
  std::vector<ContainerMount> mounts;
};

ContainerEnvironment BuildEnvironment(const ResourceAllocation& allocation, const IsolationConfig& isolation,
                                      ComputePolicy compute_policy);

// What a container holding `cards` with `core_per_card` of `core_resource` (mgpu-core, or reclaimed-mgpu-core
// for an offline container) and `memory_per_card_mib` is handed in all: BuildEnvironment of both resources,
// merged as the kubelet merges the Allocate responses of one container (the first value of a variable wins;
// a mount with the same container path is kept once). With the mgpu backend, `container_token` (non-empty)
// replaces the random MGPU_CONTAINER_TOKEN. The DRA mode's CDI spec of a claim carries exactly this
// (docs/dra.md §5), so a claim and a device-plugin container of the same share get the same limits.
ContainerEnvironment BuildContainerEnvironment(const std::vector<Card>& cards, Resource core_resource,
                                               int64_t core_per_card, int64_t memory_per_card_mib,
                                               const IsolationConfig& isolation, ComputePolicy compute_policy,
                                               const std::string& container_token = "");

// hami-core and mgpu: the host file, beside the preloaded library, that is mounted as the container's
// /etc/ld.so.preload; its content is the library's path, the same inside the container as on the host.
std::string PreloadHostPath(const std::string& library_path);
std::string PreloadContent(const std::string& library_path);

}  // namespace mgpu::node
