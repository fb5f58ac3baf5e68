// A Node as the extender's cache of cards reads it, read once at the edge (the node informer, kubectl mgpu):
// its name, its cards from D/gpu-inventory (the device plugin's) or D/gpu-dra-inventory (the DRA driver's,
// docs/dra.md §1) or the sentence saying why they cannot be counted, and the CPU and memory it offers pods.
// JSON in, a plain struct out.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"
#include "common/request.h"

namespace mgpu {

struct NodeFacts {
  std::string name;
  bool annotated = false;                  // it has a D/gpu-inventory or D/gpu-dra-inventory annotation
  bool dra = false;                        // the latter: it serves its cards through DRA, not the device plugin
  std::optional<NodeInventory> inventory;  // the annotation, when readable and in the cluster's memory unit
  std::string problem;                     // why an annotated node's cards cannot be counted
  std::string reason;  // the problem in the words kube-scheduler shows after a count of nodes (no node name)
  std::optional<HostRequest> allocatable;  // status.allocatable CPU and memory, when the node states both
};

NodeFacts ReadNode(const nlohmann::json& node, const Config& config);

}  // namespace mgpu
