// What the kubelet-facing servers (plugin.h) ask of the API-server side of the hand-off (DESIGN §5 step 2),
// below the servers so that the side that answers (pod_tracker.h) never includes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "deviceplugin/allocation.h"

namespace mgpu::dp {

// Called from the gRPC threads, concurrently.
class PendingPods {
 public:
  virtual ~PendingPods() = default;
  // Containers bound to this node with an assignment that have not been allocated `resource` yet (step 2),
  // for a kubelet asking `size` devices. May block for a bounded time while no pod here asks that many.
  virtual std::vector<PendingContainer> Candidates(Resource resource, int64_t size) = 0;
  // A GetPreferredAllocation or Allocate was refused; `container` is the one it concerned, when known.
  virtual void Refused(Resource resource, const PendingContainer* container, const std::string& message) = 0;
};

}  // namespace mgpu::dp
