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
  // model matters. With `with_reasons`, a node that does not fit carries its reason. With `waits_for` (the
  // pod's uid), a node that fits says whether binding the pod there would have to wait for a pod still
  // waiting on the node that the device plugin could confuse with it (ChooseUnambiguous leaves a conflict):
  // prioritize ranks such nodes last.
  std::vector<NodeDecision> Decide(const ClusterView& view, const std::vector<const NodeView*>& nodes,
                                   const PodRequest& pod, const WorkloadModel* model, uint64_t model_version,
                                   bool with_reasons, const std::string* waits_for = nullptr);
  // Forgets every decision.
  void Clear();

 private:
  static constexpr size_t kShapes = 8;
  struct Remembered {
    uint64_t generation = 0;  // of the node view decided; 0: nothing
    NodeDecision decision;
    // Whether a bind would wait, as decided for a pod that is not itself among the node's waiting pods:
    // then no waiting pod was passed over, so "no" holds for every pod of the shape, and "yes" for every pod
    // not waiting there. -1: not decided yet.
    int8_t waits = -1;
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
