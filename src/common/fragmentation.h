// Fragmentation-aware placement. The expected workload is learned online: a decayed histogram of the request
// shapes (core per card, card count, the pod's CPU and memory, the GPU models it may use) of the online pods
// seen so far. A node's fragmentation is the free core (percent of a card) that the expected workload could
// not use, weighted by how often each shape comes. For a shape, a card's free core is lost when it is below
// the shape's per-card core, and all of the node's free core is lost when fewer cards than the shape needs
// could take it, when the node's free CPU is short of the shape's, or when the node's GPU model is not one
// the shape may use (the idea of FGD, USENIX ATC'23, over mgpu's own cards and shapes).
//
// On top comes the free core the node's CPU or memory could not feed: the workload brings on average so much
// CPU and memory per percent of core, and free core beyond what the node's free CPU (or memory) carries at
// those ratios is stranded. FGD sees a node short only once its CPU is below a whole pod's; this term steers
// CPU-heavy pods away from GPU-dense nodes before then (bench/RESULTS.md: 4.8 -> 4.1 % of the GPUs left
// unallocated on the default openb trace). Pure: no I/O, no clocks; decay counts observations.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/model.h"

namespace mgpu {

// What a node has left, as the workload model reads it.
struct NodeFree {
  std::vector<int> core;     // online core each card can still hand out, in card order (see FreeCore)
  int64_t cpu_milli = -1;    // unrequested CPU; negative: unknown (never short)
  int64_t memory_mib = -1;   // unrequested host memory; negative: unknown
  std::string_view product;  // the node's D/gpu.product value
};

class WorkloadModel {
 public:
  // Each observation ages the earlier ones by `decay` (half-life ~1,400 pods by default).
  explicit WorkloadModel(double decay = 0.9995);

  // Adds the pod's shapes, one per GPU container. Offline pods and pods without GPU containers are not the
  // workload whose fragmentation counts.
  void Observe(const PodRequest& pod);
  bool Empty() const { return total_ == 0; }

  // Expected unusable free core on the node (0 while nothing was observed).
  double Fragmentation(const NodeFree& free) const;
  double Fragmentation(const NodeState& node) const;

 private:
  struct Shape {
    int core_per_card;
    int cards;
    int64_t cpu_milli;
    int64_t memory_mib;
    std::vector<std::string> models;  // empty: any
    double weight;                    // unaged; divide by total_ (normalised in Table::multi)
  };
  // The shapes as seen from nodes of one GPU model, for O(cards · multi-card shapes) evaluation.
  struct Table {
    double unusable = 0;  // normalised weight of the shapes that may not use this model
    // One-card shapes: their distinct CPU asks (ascending), and per count j of those a node can meet, the
    // normalised weight of shapes needing more than f core per card (single_above[j][f]) and of shapes
    // it cannot meet by CPU (cpu_short[j]).
    std::vector<int64_t> cpu_steps;
    std::vector<std::vector<double>> single_above;
    std::vector<double> cpu_short;
    std::vector<Shape> multi;  // multi-card shapes that may use this model, normalised
  };
  void Age();
  void Rebuild();
  Table BuildTable(std::string_view model) const;
  const Table& TableFor(std::string_view product) const;

  std::vector<Shape> shapes_;
  double decay_;
  double increment_ = 1.0;  // weights are stored unaged; increment_ grows instead (rescaled when large)
  double total_ = 0;
  std::vector<std::string> models_;  // every model some shape names, sorted; tables_[i] is for models_[i]
  std::vector<Table> tables_;        // ... and tables_.back() for any other model
  double cpu_per_core_ = 0;          // the workload's average CPU (milli) per percent of core; 0: none
  double memory_per_core_ = 0;       // the same for memory (MiB)
};

// Online core each card can still hand out, in card order: 0 for unhealthy cards and cards held whole.
// `usage` (parallel to node.cards) replaces the cards' own usage when given; `out` is overwritten.
void FreeCore(const NodeState& node, const std::vector<CardUsage>* usage, std::vector<int>& out);

}  // namespace mgpu
