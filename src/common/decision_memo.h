// Whether a pod fits each node, what placing it there costs and why it does not fit (the placement core's
// Decide), remembered per node view for the latest pod shapes. Pods of one shape come in bursts (the
// replicas of a Deployment), and a bind changes one node: the next pod's filter and prioritize then decide
// that node afresh and reuse the others. Filter decides fit, cost and reason at once, so prioritize is served
// from the memo. Thread-safe; a request that finds the memo busy decides without it.
#pragma once

#include <cstdint>
#include <list>
#include <map>
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

// The filter's answer for a pod over kube-scheduler's candidate nodes, in the words kube-scheduler shows.
struct FilterVerdicts {
  std::vector<size_t> passed;                       // indexes into the candidate names
  std::map<std::string, std::string> failed;        // node -> why the pod does not fit there now
  std::map<std::string, std::string> unresolvable;  // node -> why it fits nowhere (its request is invalid)
  // Failed nodes by cause: no D/gpu-inventory, a bad one, too little free capacity.
  uint64_t no_inventory = 0, bad_inventory = 0, insufficient = 0;
};

// The filter every side runs (the extender's verb, kubectl mgpu why): a pod whose request does not parse is
// unresolvable everywhere, a pod asking for no GPU passes everywhere, and a GPU pod is learned into `model`
// and decided on every usable node through `memo`, failing nodes carrying their reason.
FilterVerdicts FilterPod(const ClusterView& view, const std::vector<std::string>& names,
                         const Result<PodRequest>& pod, ModelPublisher& model, DecisionMemo& memo,
                         const Config& config);

// The nodes of `names` in `view` that can take pods (null for the others), parallel to `names`.
std::vector<const NodeView*> UsableNodes(const ClusterView& view, const std::vector<std::string>& names);

// What Place, PlacementCost and WhyNotPlaced read of a pod, as a key: two pods with one key get the same
// decisions.
std::string ShapeKey(const PodRequest& pod);

}  // namespace mgpu
