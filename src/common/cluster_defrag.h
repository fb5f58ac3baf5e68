// Defragmentation over the extender's view of the cluster (common/defrag.h's plan, fed from a ClusterView):
// for a pod, whether it fits a node, fits none because none could even with no other pod on it (larger than
// any card, more cards than a node has, ...), fits none because the free capacity is short, or fits none
// though the free capacity would hold it (fragmentation), with the plan that moves offline pods to make
// room. What kubectl mgpu why and defrag print; the extender's /metrics counts the same cause (ShortfallIn).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/cluster_cache.h"
#include "common/defrag.h"
#include "common/fragmentation.h"
#include "common/model.h"

namespace mgpu {

struct Unblocking {
  enum class Cause {
    kFits,   // some node takes the pod now: `plan` names it, with no moves
    kNever,  // no node does, nor would with no other pod on it: `sentence` says why (NoNodeCouldHold)
    kShort,  // no node does, and the free capacity of the nodes it may use is short: `sentence` says of what
    kFragmentation,  // no node does, though that free capacity would hold it: `plan` when one exists, else
                     // `sentence` says why none does
  };
  Cause cause = Cause::kFits;
  std::string sentence;
  std::optional<DefragPlan> plan;
  std::vector<const NodeView*> nodes;  // the usable nodes of the view, in name order: the plan's indexes
};

// What stops `pod` on the usable nodes of `view` other than fragmentation, as a sentence: no node could hold
// it even with no other pod on it (NoNodeCouldHold), else what their free capacity lacks for it
// (FreeCapacityShortfall); empty when neither, so that fragmentation is what keeps it off every node that
// does not take it. One pass over the nodes up to the first that could hold the pod, then over the cards,
// no plan: what the extender's filter asks of a pod no candidate node takes (PlanDefrag over a large cluster
// costs milliseconds; bench/RESULTS.md §2).
std::string ShortfallIn(const ClusterView& view, const PodRequest& pod);

// The diagnosis of `pod` (asking for some GPU) over the usable nodes of `view`; the offline pods on them
// are the ones a plan may move. `model` decides cards and costs as the extender's filter does.
Unblocking Diagnose(const ClusterView& view, const PodRequest& pod, const WorkloadModel* model);

}  // namespace mgpu
