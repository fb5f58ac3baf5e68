// What the kubelet really handed out (DESIGN §5 step 4) as plain structs: per pod, the cards and amounts each
// container holds, in the D/gpu-allocated shape. Read from the kubelet's PodResources answer by
// pod_resources.h; pure code takes this form, never the protobuf message.
#pragma once

#include <map>
#include <string>

#include "common/model.h"

namespace mgpu::dp {

// Pod key ("namespace/name") → the mgpu devices its containers hold. Containers and pods without mgpu
// devices are left out.
using AllocatedPods = std::map<std::string, Assignment>;

// Sums the allocations per card.
std::map<std::string, CardShare> UsageByCard(const AllocatedPods& pods);

}  // namespace mgpu::dp
