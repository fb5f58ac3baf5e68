// Fragmentation-aware placement. The expected workload is learned online: a decayed histogram of the request
// shapes (core per card, card count, the pod's CPU and memory, the GPU models it may use) of the online pods
// seen so far. A node's fragmentation is the free core (percent of a card) that the expected workload could
// not use, weighted by how often each shape comes. For a shape, a card's free core is lost when it is below
// the shape's per-card core, and all of the node's free core is lost when fewer cards than the shape needs
// could take it, when the node's free CPU is short of the shape's, or when the node's GPU model is not one
// the shape may use (the idea of FGD, USENIX ATC'23, over mgpu's own cards and shapes). Beyond FGD, a card's
// free core that one-card shapes fit counts by what they are expected to leave of it once they have filled
// it, as far as they come often enough to (bench/RESULTS.md: 4.13 -> 3.92 % on the default openb trace).
//
// On top comes the free core the node's CPU or memory could not feed: the workload brings on average so much
// CPU and memory per percent of core, and free core beyond what the node's free CPU (or memory) carries at
// those ratios is stranded. FGD sees a node short only once its CPU is below a whole pod's; this term steers
// CPU-heavy pods away from GPU-dense nodes before then (bench/RESULTS.md: 4.8 -> 4.1 % of the GPUs left
// unallocated on the default openb trace).
//
// And the cluster's view: pods bound to a few GPU models need those models' free core, and a pod that could
// go anywhere should leave it to them. Given the free core per model (SetClusterFree), a model's pressure is
// the share of its free core the bound shapes are expected to claim, and a node's free core is worth that
// much more (bench/RESULTS.md: 7.5 -> 4.2 % on the gpuspec20 trace, where unbound pods had filled the T4
// nodes). Likewise for the nodes a multi-card shape needs whole: given every node's free cards, CPU and
// memory, a shape's host pressure is the nodes its share of the demand is expected to claim over the nodes
// that could take it now, and a node that could take it is worth keeping so (bench/RESULTS.md: multi-GPU
// pods failing on the openb lists, 6 -> 3 a seed on the default one). Pure: no I/O, no clocks; decay counts
// observations.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

// The cluster as the workload model reads it: the free core (FreeCore, summed) per D/gpu.product value, and
// what each node has left (products point into the caller's nodes).
struct ClusterFree {
  std::map<std::string, double, std::less<>> core;
  std::vector<NodeFree> nodes;
  void Add(const NodeState& node);  // FreeOf(node), counted in both
};

class WorkloadModel {
 public:
  // Each observation ages the earlier ones by `decay` (half-life ~1,400 pods by default).
  explicit WorkloadModel(double decay = 0.9995);

  // Adds the pod's shapes, one per GPU container. Offline pods and pods without GPU containers are not the
  // workload whose fragmentation counts.
  void Observe(const PodRequest& pod);
  // Observe without building the tables Fragmentation reads: the next SetClusterFree builds them. For a
  // publisher that learns pod by pod and publishes a copy now and then (ModelPublisher): the tables cost
  // more than the learning.
  void Learn(const PodRequest& pod);
  bool Empty() const { return total_ == 0; }

  // Expected unusable free core on the node (0 while nothing was observed), less what its model's pressure
  // makes its free core worth. A card's free core counts by what the one-card shapes are expected to leave
  // of it once they have filled it, as far as they come often enough to fill it (see BuildTable).
  double Fragmentation(const NodeFree& free) const;
  double Fragmentation(const NodeState& node) const;

  // The cluster's free core per product: free core of a model that the shapes bound to it are expected to
  // claim counts as worth keeping (see Pressure). And its nodes (read during the call only): a node that
  // could take a multi-card shape, while too few could, counts as worth keeping for it (see SetPressure);
  // without them (an empty list) that is never the case.
  void SetClusterFree(const ClusterFree& cluster);
  // The share of the model's free core that shapes which may use it only among their listed models are
  // expected to claim: each such shape's share of the demand, taken as the cluster's free core, spread over
  // its models by their free core. 0 before SetClusterFree.
  double Pressure(std::string_view product) const { return TableFor(product).pressure; }

 private:
  struct Shape {
    int core_per_card;
    int cards;
    int64_t cpu_milli;
    int64_t memory_mib;
    std::vector<std::string> models;  // empty: any
    double weight;                    // unaged; divide by total_ (normalised in Table::multi)
    size_t index = 0;                 // in Table::multi: the shape's place in shapes_
    int hosts = -1;                   // multi-card shapes: the nodes that could take one (-1: not known)
    double host_pressure = 0;         // in Table::multi: see SetPressure
  };
  // The shapes as seen from nodes of one GPU model, for O(cards · multi-card shapes) evaluation.
  struct Table {
    double unusable = 0;  // normalised weight of the shapes that may not use this model
    double pressure = 0;  // share of the model's free core that shapes bound to it are expected to claim
    // One-card shapes: their distinct CPU asks (ascending), and per count j of those a node can meet, the
    // core a card with f free is expected to leave unused in the end (waste[j][f], see BuildTable) and the
    // normalised weight of the shapes it cannot meet by CPU (cpu_short[j]).
    std::vector<int64_t> cpu_steps;
    std::vector<std::vector<double>> waste;
    std::vector<double> cpu_short;
    std::vector<Shape> multi;  // multi-card shapes that may use this model, normalised
  };
  void Age();
  void Rebuild();
  void SetPressure();
  Table BuildTable(std::string_view model) const;
  const Table& TableFor(std::string_view product) const;

  std::vector<Shape> shapes_;
  double decay_;
  bool stale_ = false;      // shapes learned since the tables were built
  double increment_ = 1.0;  // weights are stored unaged; increment_ grows instead (rescaled when large)
  double total_ = 0;
  std::vector<std::string> models_;  // every model some shape names, sorted; tables_[i] is for models_[i]
  std::vector<Table> tables_;        // ... and tables_.back() for any other model
  double cpu_per_core_ = 0;          // the workload's average CPU (milli) per percent of core; 0: none
  double memory_per_core_ = 0;       // the same for memory (MiB)
  double core_weight_ = 0;           // the shapes' total weight of core (unaged)
  std::map<std::string, double, std::less<>> cluster_free_;
};

// What `node` has left (product points into it).
NodeFree FreeOf(const NodeState& node);

// Online core each card can still hand out, in card order: 0 for unhealthy cards and cards held whole.
// `usage` (parallel to node.cards) replaces the cards' own usage when given; `out` is overwritten.
void FreeCore(const NodeState& node, const std::vector<CardUsage>* usage, std::vector<int>& out);

}  // namespace mgpu
