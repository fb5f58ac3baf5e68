// The ListAndWatch message of one resource, and the kubelet's 4 MiB limit on it (DESIGN §2).
#pragma once

#include <cstddef>
#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"
#include "deviceplugin/devices.h"
#include "kubelet/deviceplugin/v1beta1/api.pb.h"

namespace mgpu::dp {

// The kubelet's gRPC receive limit for one ListAndWatchResponse.
inline constexpr size_t kMaxListAndWatchBytes = 4194304;

// Every device of `resource` on `cards`, in card order; the devices of an unhealthy card are "Unhealthy".
v1beta1::ListAndWatchResponse BuildDeviceList(const std::vector<Card>& cards, Resource resource,
                                              const Config& config);

// The exact serialized size of BuildDeviceList's message for `resource` were every card unhealthy (the
// largest it can grow to), without building it.
size_t WorstCaseListBytes(const std::vector<Card>& cards, Resource resource, const Config& config);

// The smallest memoryUnitMiB, no smaller than config's, whose mgpu-memory list always fits the limit.
int64_t SmallestMemoryUnit(const std::vector<Card>& cards, const Config& config);

// Fails, naming SmallestMemoryUnit, when the mgpu-memory list could exceed the limit.
Status CheckListAndWatchSize(const std::vector<Card>& cards, const Config& config);

}  // namespace mgpu::dp
