// The plugin's preferred allocation (DESIGN §5 step 2) as a pure function of what the kubelet sends, the
// node's cards and config: which device IDs to prefer for a container (what a set of device IDs means, step
// 3, is ReadAllocation in devices.h). No I/O, no locks, no clocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"
#include "deviceplugin/devices.h"

namespace mgpu::dp {

// A container bound to this node with a D/gpu-assignment that has not yet been allocated the resource asked
// about: one candidate for a GetPreferredAllocation call.
struct PendingContainer {
  std::string pod;  // namespace/name
  std::string container;
  std::vector<CardShare> cards;  // the container's part of the pod's assignment
  int64_t assume_time_ns = 0;    // D/gpu-assume-time
  std::string pod_uid{};
  int order = 0;  // the container's place in the pod (init containers first), the order the kubelet admits in
  int pool_size = 1;  // members of its look-alike pool on this node (1: none alike)
};

// One ContainerPreferredAllocationRequest; the IDs are the caller's (the kubelet's request), not copied.
struct PreferredRequest {
  std::vector<std::string_view> available;
  std::vector<std::string_view> must_include;
  int64_t size = 0;
};

struct Preference {
  std::vector<std::string> device_ids;
  // The candidate the IDs were matched to; empty when no candidate fit and the shared allocator chose.
  std::string pod;
  std::string container;
};

// Step 2 of DESIGN §5. Candidates fit when their request for `resource` equals `size` devices and each of
// their assigned cards has that many of the kubelet's available IDs (must_include IDs on those cards). Among
// fitting ones, prefer one whose assigned cards are `just_allocated` (the cards another resource of the
// container being admitted was just given), then the oldest assume time, then the pod and the container's
// place in it. With none, the shared allocator chooses from the available IDs alone (trying `just_allocated`
// first so core and memory share a card). Answers IDs on the chosen cards, must_include first, then the
// lowest ordinals.
Result<Preference> ChoosePreferred(Resource resource, const PreferredRequest& request,
                                   const std::vector<PendingContainer>& candidates,
                                   const std::vector<std::string>& just_allocated,
                                   const std::vector<Card>& cards, const Config& config);

}  // namespace mgpu::dp
