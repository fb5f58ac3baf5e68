// The pods bound to this node as the plugin reads them (DESIGN §5 steps 2 and 4): which containers still
// wait for a resource the extender assigned them, and whether the kubelet has handed a pod everything it
// asks for. Pure functions over pods parsed once at the edge; the API-server plumbing is pod_tracker.h.
#pragma once

#include <compare>
#include <map>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/lookalike.h"
#include "common/model.h"
#include "common/pod_facts.h"
#include "common/request.h"
#include "deviceplugin/allocated_pods.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/devices.h"

namespace mgpu::dp {

struct NodePod {
  std::string key;  // namespace/name
  std::string uid;
  std::string resource_version;
  bool active = false;  // neither finished nor being deleted
  // The GPU containers (init containers first, in spec order) when the pod's request parses, with the
  // annotations of its workload as the extender reads them (DESIGN §3), so both sides see one shape.
  std::optional<std::vector<ContainerRequest>> containers{};
  PodRequest shape{};  // the request's pod-wide fields (QoS, compute policy, dedicated), for look-alike pools
  std::optional<Assignment> assignment{};  // D/gpu-assignment, when present and readable
  int64_t assume_time_ns = 0;              // D/gpu-assume-time; 0 when absent
  std::optional<Assignment> allocated{};   // D/gpu-allocated as last written
  std::set<std::string> started{};         // containers the kubelet has created: admitted long ago
  std::vector<std::string> problems{};     // annotations or requests that could not be read, one each
};

// The plugin's view of a pod read at the edge (common/pod_facts.h).
NodePod NodePodOf(PodFacts pod);
// NodePodOf(ReadPod(pod, config, workload)); `workload`: the annotations of the pod's controlling workload.
NodePod ReadNodePod(const nlohmann::json& pod, const Config& config, const Annotations& workload = {});

// A resource this plugin handed to a container that the kubelet's PodResources may not show yet: the
// container the preference was matched to (in a look-alike pool, the kubelet may have admitted another
// member) and the cards handed out.
struct HandedOut {
  std::string pod_uid;
  std::string container;
  Resource resource = Resource::kCore;
  auto operator<=>(const HandedOut&) const = default;
};
using HandedOutCards = std::map<HandedOut, CardSet>;

struct Pending {
  std::vector<PendingContainer> candidates;  // containers with an assignment still waiting for the resource
  // Some container here waits for exactly the asked number of devices: a candidate, or a container of a pod
  // scheduled without the extender (no assignment), which the shared allocator places.
  bool explained = false;
};

// The containers of active `pods` that were assigned `resource` and have not been allocated it: not in
// the kubelet's `allocated` answer, not in `handed_out`, not started. Look-alikes are one pool
// (common/lookalike.h): each waiting member is offered the cards the pool holds for it, which are its own
// assigned cards unless another member was given them.
Pending FindPending(const std::vector<NodePod>& pods, Resource resource, int64_t size,
                    const AllocatedPods& allocated, const HandedOutCards& handed_out, const Config& config);

// Whether the cards a container holds are cards assigned to one of its look-alikes on this node (a swap
// inside a pool, which is normal), as opposed to cards no look-alike was assigned.
bool WithinPool(const std::vector<NodePod>& pods, const NodePod& pod, const ContainerAssignment& held);

// Whether `truth` (the pod's devices in PodResources) holds every mgpu resource each of the pod's GPU
// containers asks for. Init containers are not listed by PodResources and are not required. A pod whose
// request does not parse is taken as the kubelet shows it.
bool AllocationComplete(const NodePod& pod, const Assignment& truth);

// Containers by name, each one's cards by uuid: one form to compare and to write.
Assignment Normalized(Assignment assignment);

}  // namespace mgpu::dp
