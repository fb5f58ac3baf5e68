// The node's ResourceSlices (docs/dra.md §2): one pool named after the node; per group of at most 8 cards a
// slice of counter sets (one per card, "sharing": 1) and a slice of devices (six per card, each consuming the
// card's "sharing"), or with one variant per card (dra.cards) only the slice of devices (one per card), with
// attributes, capacities, request policies and, for an unhealthy card, the taint
// <driver>/unhealthy:NoSchedule. Pure functions: what to publish, and whether what is stored already says it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "dra/devices.h"

namespace mgpu::dra {

inline constexpr size_t kCardsPerSlice = 8;  // counter sets per slice (v1.36 validation)

// Every ResourceSlice of the node's pool, complete objects (apiVersion, kind, metadata.name, spec) at
// `generation`, in a fixed order.
std::vector<nlohmann::json> BuildSlices(const std::string& node, const std::vector<NodeCard>& cards,
                                        const Config& config, int64_t generation);

// Whether a stored slice's spec says what `wanted`'s does, whatever either's pool generation (the taints'
// timeAdded, which the API server fills in, is not compared).
bool SameSpec(const nlohmann::json& stored, const nlohmann::json& wanted);

}  // namespace mgpu::dra
