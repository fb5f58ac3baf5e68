// The three kubelet resources of DESIGN §2 and their device IDs. A device ID names its card and resource,
// stably across plugin restarts, so the kubelet's checkpoint records which card each container holds:
//   <card uuid>-c<k>  mgpu-core, k in [0, 100)
//   <card uuid>-m<k>  mgpu-memory, k in [0, capacity / memoryUnitMiB)
//   <card uuid>-r<k>  reclaimed-mgpu-core, k in [0, 100)
// And what the IDs of an Allocate call mean (DESIGN §5 step 3). Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"
#include "node/environment.h"

namespace mgpu::dp {

std::string DeviceId(std::string_view card_uuid, Resource resource, int64_t ordinal);

struct ParsedDeviceId {
  std::string_view card_uuid;  // into the parsed ID
  Resource resource = Resource::kCore;
  int64_t ordinal = 0;
};

// Inverse of DeviceId; an ID that does not have its shape is an error naming it.
Result<ParsedDeviceId> ParseDeviceId(std::string_view id);

// How many devices of `resource` one card advertises: 100 for the cores, the card's memory less
// reservedMemoryMiB divided by memoryUnitMiB for memory.
int64_t DevicesPerCard(const Card& card, Resource resource, const Config& config);

// How many resource units one device stands for in MiB (memory) or percent (cores).
int64_t UnitOf(Resource resource, const Config& config);

// Devices of `resource` that a container's share of one card stands for; -1 when the share is not a whole
// number of them.
int64_t DevicesOf(const CardShare& share, Resource resource, const Config& config);
// Devices of `resource` a container asks for in all, over all its cards (its memory is whole units already).
int64_t DevicesOf(const ContainerRequest& request, Resource resource, const Config& config);

// The card of `uuid` among `cards`; null when there is none.
const Card* FindCard(const std::vector<Card>& cards, std::string_view uuid);

// A device ID of `resource` on a card of this node, read: its card and ordinal. `hint` is tried first (IDs
// come card by card). An ID of another resource, of a card the node does not have or beyond the card's
// devices is an error naming it.
struct ReadDevice {
  const Card* card;
  int64_t ordinal;
};
Result<ReadDevice> ReadDeviceId(std::string_view id, Resource resource, const std::vector<Card>& cards,
                                const Config& config, const Card* hint = nullptr);

// Step 3: what the device IDs mean. Every ID must be a well-formed ID of `resource` on a known, healthy card,
// without repeats, and every card must get the same amount; anything else is an error naming the ID or card.
Result<node::ResourceAllocation> ReadAllocation(Resource resource, const std::vector<std::string>& device_ids,
                                                const std::vector<Card>& cards, const Config& config);

}  // namespace mgpu::dp
