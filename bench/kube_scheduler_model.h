// A model of the parts of kube-scheduler v1.36 that decide where a pod goes when mgpu is deployed as an
// extender, for the trace replay's mgpu-as-shipped policy: which pods the extender sees (managedResources),
// how many feasible nodes the scheduler looks for and from where (percentageOfNodesToScore,
// nextStartNodeIndex), how it scores the nodes for a pod the extender does not see (NodeResourcesFit's
// scoring strategy and NodeResourcesBalancedAllocation, with their weights) and how it picks among equal top
// scores. The settings come from a KubeSchedulerConfiguration file (LoadKubeSchedulerModel), not from code.
//
// The facts are read from the v1.36 source (openshift/microshift, branch release-4.23, whose
// deps/github.com/openshift/kubernetes is Kubernetes v1.36.3); each function names the Go function it
// follows. Score plugins that give every node of the replay's cluster the same score (TaintToleration,
// NodeAffinity, PodTopologySpread, InterPodAffinity, ImageLocality: no taints, affinities, owners or images
// on the trace's pods and nodes) change no choice and are left out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace mgpu::bench {

// Amounts of the resources the scheduler scores: cpu in millicores, memory in bytes, extended resources by
// name in their own units.
struct KubeAmounts {
  int64_t cpu_milli = 0;
  int64_t memory = 0;
  std::map<std::string, int64_t> scalar;
};

// A node as kube-scheduler's NodeInfo sees it: allocatable, the sum of its pods' requests, and the same sum
// with a pod's missing cpu or memory request counted at the non-zero default (NonZeroRequested).
struct KubeNodeView {
  KubeAmounts allocatable, requested, nonzero_requested;
};

enum class ScoringStrategy { kLeastAllocated, kMostAllocated, kRequestedToCapacityRatio };

struct ResourceWeight {
  std::string name;  // cpu, memory or an extended resource
  int64_t weight = 1;
};

struct ShapePoint {
  int64_t utilization = 0;  // 0..100
  int64_t score = 0;        // 0..10, as the configuration writes it
};

class KubeSchedulerModel {
 public:
  // The default profile of a configuration that sets nothing (apis/config/v1/defaults.go,
  // default_plugins.go).
  KubeSchedulerModel() = default;

  // 0: adaptive (numFeasibleNodesToFind's default). The first profile's, which the model's scores are.
  int32_t percentage_of_nodes_to_score = 0;
  // Every profile's percentage by its schedulerName (the global one where the profile sets none).
  std::map<std::string, int32_t> profile_percentages;
  // GPU pods' percentage where they go to a profile of their own (the webhook's dra.schedulerName; the
  // replay's --gpu-profile), else none: the first profile's.
  std::optional<int32_t> gpu_pod_percentage;
  ScoringStrategy strategy = ScoringStrategy::kLeastAllocated;
  std::vector<ResourceWeight> fit_resources = {{"cpu", 1}, {"memory", 1}};
  std::vector<ShapePoint> shape;  // RequestedToCapacityRatio only
  std::vector<ResourceWeight> balanced_resources = {{"cpu", 1}, {"memory", 1}};
  int64_t fit_weight = 1, balanced_weight = 1;
  // The configuration's extenders, in order.
  struct Extender {
    std::vector<std::string> managed_resources;  // empty: it sees every pod (HTTPExtender.IsInterested)
    std::string filter_verb;
  };
  std::vector<Extender> extenders;

  // Whether an extender that is called for a pod asking for these of mgpu's resources (extender.go,
  // IsInterested) decides its node by mgpu's policy: any verb for a pod asking for some (choose; filter and
  // prioritize, whose scores the replay takes as mgpu's alone), `choose-cpu-only` for a pod asking for none
  // (server.cc: it passes every other pod unchanged).
  bool ExtenderDecides(const std::vector<std::string>& mgpu_resources) const;

  // schedule_one.go, numFeasibleNodesToFind: feasible nodes the scheduler stops at among `num_nodes`, for
  // the first profile, or with a profile's `percentage` (PercentageOf: an error when no profile has the name).
  int32_t NumFeasibleNodesToFind(int32_t num_nodes) const;
  static int32_t NumFeasibleNodesToFind(int32_t num_nodes, int32_t percentage);
  Result<int32_t> PercentageOf(const std::string& profile) const;

  // The weighted sum of NodeResourcesFit's and NodeResourcesBalancedAllocation's scores of `node` for a pod
  // requesting `pod` (framework.RunScorePlugins: score × weight, summed).
  int64_t Score(const KubeNodeView& node, const KubeAmounts& pod) const;
  int64_t FitScore(const KubeNodeView& node, const KubeAmounts& pod) const;
  int64_t BalancedScore(const KubeNodeView& node, const KubeAmounts& pod) const;
};

// Reads a KubeSchedulerConfiguration file: the global and every profile's percentageOfNodesToScore, the first
// profile's score plugin weights and NodeResourcesFit / NodeResourcesBalancedAllocation args, the extenders'
// managedResources and filterVerb. An error names what was wrong.
Result<KubeSchedulerModel> LoadKubeSchedulerModel(const std::string& path);

// Which nodes a scheduling cycle hands to scoring or the extender: schedule_one.go,
// findNodesThatPassFilters, run in index order from the rotating start (the real scheduler checks the nodes
// in parallel chunks, so its sample is the same size but not exactly the same nodes).
class NodeSampler {
 public:
  // The first `to_find` nodes, from the start index on, for which `fits(i)` holds; moves the start index on
  // by the nodes processed (findNodesThatFitPod: the feasible ones plus the ones that failed a filter).
  std::vector<size_t> Sample(size_t num_nodes, size_t to_find, const std::function<bool(size_t)>& fits);
  size_t next_start() const { return next_start_; }

 private:
  size_t next_start_ = 0;
};

// The position in `scores` of the node kube-scheduler binds when no extender scored the nodes: the top of
// Go's container/heap over the nodes in feasible order (schedule_one.go, newSortedNodeScores and Pop), whose
// order, nodeScoreHeap.Less, breaks equal scores by a Randomizer that prioritizeNodes sets only from an
// interested extender's scores: without one every Randomizer is 0 and the choice has no randomness.
size_t TopScoredNode(const std::vector<int64_t>& scores);

}  // namespace mgpu::bench
