// Fragmentation-aware placement. The expected workload is learned online: a decayed histogram of the request
// shapes (core per card, card count) of the online containers seen so far. A node's fragmentation is the free
// core (percent of a card) that the expected workload could not use, weighted by how often each shape comes:
// for a shape, a card's free core is lost when it is below the shape's per-card core, and all of the node's
// free core is lost when fewer cards than the shape needs could take it. Placing a pod where that grows least
// leaves the most usable capacity (the idea of FGD, USENIX ATC'23, over mgpu's own cards and shapes).
#pragma once

#include <array>
#include <vector>

#include "common/model.h"

namespace mgpu {

class WorkloadModel {
 public:
  // Each observation ages the earlier ones by `decay` (half-life ~1,400 pods by default).
  explicit WorkloadModel(double decay = 0.9995);

  // Adds the shapes of the pod's online containers.
  void Observe(const PodRequest& pod);
  bool Empty() const { return total_ == 0; }

  // Expected unusable free core on the node given its current usage (0 while nothing was observed).
  double Fragmentation(const NodeState& node) const;
  // The same for `free` core per card (see FreeCore).
  double Fragmentation(const std::vector<int>& free) const;

 private:
  struct MultiCardShape {
    int core_per_card;
    int cards;
    double weight;
  };
  void Age();

  std::array<double, 101> single_{};        // weight of one-card shapes by core per card
  std::array<double, 102> single_above_{};  // normalised weight of one-card shapes needing more than f
  std::vector<MultiCardShape> multi_;
  double decay_;
  double increment_ = 1.0;  // weights are stored unaged; increment_ grows instead (rescaled when large)
  double total_ = 0;
};

// Online core each card can still hand out, in card order: 0 for unhealthy cards and cards held whole.
std::vector<int> FreeCore(const NodeState& node);

}  // namespace mgpu
