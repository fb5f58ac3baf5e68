// The per-card capacity rules of DESIGN §4, as pure functions over a node's cards: does a pod fit, on which
// cards, what does placing it do to usage, and how good is the node. No I/O, no locks, no clocks: the
// extender, the device plugin and the trace replay all call these.
#pragma once

#include <string>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu {

// The allocator's view of a node with nothing allocated yet. A card's memory capacity is its memory less
// `reservedMemoryMiB`, rounded down to `memoryUnitMiB` (what the device plugin advertises).
NodeState MakeNodeState(std::string name, const NodeInventory& inventory, const Config& config);

// Chooses cards for every GPU container of `pod` by the pod's card policy: binpack takes the feasible cards
// left with the least free capacity, spread the most; ties go to the lower card index. Fails with a sentence
// a person can act on ("no card can take ...: best card ... has ...").
Result<Assignment> ChooseCards(const NodeState& node, const PodRequest& pod);

// Adds `assignment` to the node's usage. Every share is checked first (known healthy card, the container's
// exact per-card amounts on distinct cards, every rule of §4); on error the node is unchanged.
Status Apply(NodeState& node, const PodRequest& pod, const Assignment& assignment);

// Removes what Apply added; on error (the assignment was not applied) the node is unchanged.
Status Release(NodeState& node, const PodRequest& pod, const Assignment& assignment);

// 0..10 for placing `assignment` (from ChooseCards) on the node: binpack prefers fuller nodes, spread
// emptier.
int ScoreNode(const NodeState& node, const Assignment& assignment, NodePolicy policy);

}  // namespace mgpu
