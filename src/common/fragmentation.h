// Fragmentation-aware placement. The expected workload is learned online: a decayed histogram of the request
// shapes (core per card, card count, CPU) of the online pods seen so far. A node's fragmentation is the free
// core (percent of a card) that the expected workload could not use, weighted by how often each shape comes:
// for a shape, a card's free core is lost when it is below the shape's per-card core, and all of the node's
// free core is lost when fewer cards than the shape needs could take it or the node's free CPU is short of
// the shape's. Placing a pod where that grows least leaves the most usable capacity (the idea of FGD, USENIX
// ATC'23, over mgpu's own cards and shapes). Pure: no I/O, no clocks; decay counts observations.
#pragma once

#include <cstdint>
#include <vector>

#include "common/model.h"

namespace mgpu {

class WorkloadModel {
 public:
  // Each observation ages the earlier ones by `decay` (half-life ~1,400 pods by default).
  explicit WorkloadModel(double decay = 0.9995);

  // Adds the pod's shapes: one per GPU container, or one needing only CPU for a pod without GPU containers
  // (the CPU is the pod's). Offline pods are not the online workload.
  void Observe(const PodRequest& pod);
  bool Empty() const { return total_ == 0; }

  // Expected unusable free core on the node given its current usage (0 while nothing was observed).
  double Fragmentation(const NodeState& node) const;
  // The same for `free` core per card (see FreeCore) and the node's free CPU (negative: unknown, never
  // short).
  double Fragmentation(const std::vector<int>& free, int64_t cpu_free_milli) const;

 private:
  struct Shape {
    int core_per_card;
    int cards;
    int64_t cpu_milli;
    double weight;  // unaged; divide by total_
  };
  void Age();
  void Add(int core_per_card, int cards, int64_t cpu_milli);
  void Rebuild();

  std::vector<Shape> shapes_;
  double decay_;
  double increment_ = 1.0;  // weights are stored unaged; increment_ grows instead (rescaled when large)
  double total_ = 0;
  // Derived from the one-card shapes for O(cards) evaluation: their distinct CPU asks (ascending), and per
  // count j of those a node can meet, the normalised weight of shapes needing more than f core per card
  // (single_above_[j][f]) and of shapes it cannot meet by CPU (cpu_short_[j]).
  std::vector<int64_t> cpu_steps_;
  std::vector<std::vector<double>> single_above_;
  std::vector<double> cpu_short_;
  std::vector<Shape> multi_;  // normalised multi-card shapes
};

// Online core each card can still hand out, in card order: 0 for unhealthy cards and cards held whole.
// `usage` (parallel to node.cards) replaces the cards' own usage when given; `out` is overwritten.
void FreeCore(const NodeState& node, const std::vector<CardUsage>* usage, std::vector<int>& out);

}  // namespace mgpu
