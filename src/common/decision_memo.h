// Whether a pod fits each node, what placing it there costs and why it does not fit (the placement core's
// Decide), remembered per node view for the latest pod shapes. Pods of one shape come in bursts (the
// replicas of a Deployment), and a bind changes one node: the next pod's filter and prioritize then decide
// that node afresh and reuse the others. Filter decides fit, cost and reason at once, so prioritize is served
// from the memo. Thread-safe; a request that finds the memo busy decides without it.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "common/cluster_cache.h"
#include "common/fragmentation.h"
#include "common/model.h"
#include "common/result.h"
#include "common/scheduler.h"

namespace mgpu {

class DecisionMemo {
 public:
  // The decision for `pod` on each of `nodes` (parallel; null entries stay "does not fit", with no reason).
  // `model_version` names `model`'s content: decisions made under another version are not reused where the
  // model matters. With `with_reasons`, a node that does not fit carries its reason.
  std::vector<NodeDecision> Decide(const ClusterView& view, const std::vector<const NodeView*>& nodes,
                                   const PodRequest& pod, const WorkloadModel* model, uint64_t model_version,
                                   bool with_reasons);

 private:
  static constexpr size_t kShapes = 8;
  struct Remembered {
    uint64_t generation = 0;  // of the node view decided; 0: nothing
    NodeDecision decision;
  };
  struct Table {
    std::string shape;
    std::vector<Remembered> by_slot;
  };
  std::mutex mu_;
  std::list<Table> tables_;  // most recently used first
};

// What Place, PlacementCost and WhyNotPlaced read of a pod, as a key: two pods with one key get the same
// decisions.
std::string ShapeKey(const PodRequest& pod);

}  // namespace mgpu
