#include "bench/kube_scheduler_model.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <exception>

namespace mgpu::bench {
namespace {

constexpr int64_t kMaxNodeScore = 100;  // framework.MaxNodeScore
constexpr int32_t kMinFeasibleNodesToFind = 100, kMinFeasibleNodesPercentageToFind = 5;  // schedule_one.go
// util.DefaultMilliCPURequest and DefaultMemoryRequest: what a missing request counts as in NonZeroRequested.
constexpr int64_t kDefaultMilliCpuRequest = 100, kDefaultMemoryRequest = 200LL * 1024 * 1024;

// util.IsScalarResourceName, for the names a scheduler configuration can list: all but the native ones.
bool IsScalar(const std::string& name) {
  return name != "cpu" && name != "memory" && name != "ephemeral-storage" && name != "pods";
}

int64_t Amount(const KubeAmounts& a, const std::string& name) {
  if (name == "cpu") return a.cpu_milli;
  if (name == "memory") return a.memory;
  auto it = a.scalar.find(name);
  return it == a.scalar.end() ? 0 : it->second;
}

// resource_allocation.go, calculateNodeAllocatableRequest: per resource, the node's allocatable and the
// requested amount with the pod; a resource is left at 0 (and so skipped by every scorer) when the node does
// not have it, or when it is an extended resource the pod does not ask for. `nonzero`: Fit's scorers count
// the node's and the pod's missing cpu and memory requests at the defaults (useRequested false);
// BalancedAllocation takes them as they are (useRequested true).
void AllocatableRequested(const std::vector<ResourceWeight>& resources, const KubeNodeView& node,
                          const KubeAmounts& pod, bool nonzero, std::vector<int64_t>& requested,
                          std::vector<int64_t>& allocated, std::vector<int64_t>& allocatable) {
  requested.assign(resources.size(), 0);
  allocated.assign(resources.size(), 0);
  allocatable.assign(resources.size(), 0);
  for (size_t i = 0; i < resources.size(); ++i) {
    const std::string& name = resources[i].name;
    int64_t pod_request = Amount(pod, name);
    if (nonzero && name == "cpu" && pod_request == 0) pod_request = kDefaultMilliCpuRequest;
    if (nonzero && name == "memory" && pod_request == 0) pod_request = kDefaultMemoryRequest;
    if (pod_request == 0 && IsScalar(name)) continue;
    const int64_t node_allocatable = Amount(node.allocatable, name);
    if (node_allocatable == 0) continue;
    const bool native = name == "cpu" || name == "memory";
    allocatable[i] = node_allocatable;
    allocated[i] = Amount(nonzero && native ? node.nonzero_requested : node.requested, name);
    requested[i] = allocated[i] + pod_request;
  }
}

// least_allocated.go, leastRequestedScore.
int64_t LeastRequested(int64_t requested, int64_t capacity) {
  if (capacity == 0 || requested > capacity) return 0;
  return (capacity - requested) * kMaxNodeScore / capacity;
}

// most_allocated.go, mostRequestedScore.
int64_t MostRequested(int64_t requested, int64_t capacity) {
  if (capacity == 0) return 0;
  return std::min(requested, capacity) * kMaxNodeScore / capacity;
}

// helper/shape_score.go, BuildBrokenLinearFunction, over points whose scores are already scaled to 0..100.
int64_t BrokenLinear(const std::vector<ShapePoint>& shape, int64_t p) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (p > shape[i].utilization) continue;
    if (i == 0) return shape[0].score;
    return shape[i - 1].score + (shape[i].score - shape[i - 1].score) * (p - shape[i - 1].utilization) /
                                    (shape[i].utilization - shape[i - 1].utilization);
  }
  return shape.back().score;
}

// balanced_allocation.go, balancedResourceScore.
int64_t BalancedResourceScore(const std::vector<int64_t>& requested,
                              const std::vector<int64_t>& allocatable) {
  std::vector<double> fractions;
  double total = 0;
  for (size_t i = 0; i < requested.size(); ++i) {
    if (allocatable[i] == 0) continue;
    const double f = std::min(1.0, static_cast<double>(requested[i]) / static_cast<double>(allocatable[i]));
    total += f;
    fractions.push_back(f);
  }
  double sd = 0;
  if (fractions.size() == 2) {
    sd = std::abs((fractions[0] - fractions[1]) / 2);
  } else if (fractions.size() > 2) {
    const double mean = total / static_cast<double>(fractions.size());
    double sum = 0;
    for (double f : fractions) sum += (f - mean) * (f - mean);
    sd = std::sqrt(sum / static_cast<double>(fractions.size()));
  }
  return static_cast<int64_t>((1 - sd) * static_cast<double>(kMaxNodeScore));
}

std::vector<ResourceWeight> ResourcesOf(const YAML::Node& list) {
  std::vector<ResourceWeight> out;
  for (const auto& r : list) {
    ResourceWeight w{r["name"].as<std::string>(), r["weight"] ? r["weight"].as<int64_t>() : 1};
    if (w.weight == 0)
      w.weight = 1;  // defaults.go: SetDefaults_NodeResourcesFitArgs and ..BalancedAllocationArgs
    out.push_back(w);
  }
  return out;
}

// The weight a plugin set's enabled list gives `plugin` (a weight of 0 or none keeps `weight`), and 0 when
// the set disables it (by name or "*") without enabling it again.
void ApplyPluginSet(const YAML::Node& set, const std::string& plugin, int64_t& weight) {
  if (!set) return;
  for (const auto& d : set["disabled"]) {
    const std::string name = d["name"].as<std::string>();
    if (name == plugin || name == "*") weight = 0;
  }
  for (const auto& e : set["enabled"]) {
    if (e["name"].as<std::string>() != plugin) continue;
    const int64_t w = e["weight"] ? e["weight"].as<int64_t>() : 0;
    weight = w > 0 ? w : std::max<int64_t>(weight, 1);
  }
}

Result<KubeSchedulerModel> Parse(const YAML::Node& root) {
  KubeSchedulerModel m;
  if (!root.IsMap() || !root["kind"] || root["kind"].as<std::string>() != "KubeSchedulerConfiguration")
    return Error{"the file is no KubeSchedulerConfiguration"};
  if (root["percentageOfNodesToScore"])
    m.percentage_of_nodes_to_score = root["percentageOfNodesToScore"].as<int32_t>();
  // Each profile's own percentage, else the global one (schedule_one.go, numFeasibleNodesToFind); the
  // first profile's is the model's.
  const int32_t global_percentage = m.percentage_of_nodes_to_score;
  for (const auto& profile : root["profiles"]) {
    const std::string name =
        profile["schedulerName"] ? profile["schedulerName"].as<std::string>() : "default-scheduler";
    const int32_t percentage = profile["percentageOfNodesToScore"]
                                   ? profile["percentageOfNodesToScore"].as<int32_t>()
                                   : global_percentage;
    if (m.profile_percentages.empty()) m.percentage_of_nodes_to_score = percentage;
    m.profile_percentages[name] = percentage;
  }
  if (const YAML::Node profiles = root["profiles"]; profiles && profiles.size() > 0) {
    const YAML::Node profile = profiles[0];
    if (const YAML::Node plugins = profile["plugins"]) {
      for (const char* point : {"multiPoint", "score"}) {
        ApplyPluginSet(plugins[point], "NodeResourcesFit", m.fit_weight);
        ApplyPluginSet(plugins[point], "NodeResourcesBalancedAllocation", m.balanced_weight);
      }
    }
    for (const auto& pc : profile["pluginConfig"]) {
      const std::string name = pc["name"].as<std::string>();
      const YAML::Node args = pc["args"];
      if (!args) continue;
      if (name == "NodeResourcesBalancedAllocation" && args["resources"])
        m.balanced_resources = ResourcesOf(args["resources"]);
      if (name != "NodeResourcesFit" || !args["scoringStrategy"]) continue;
      const YAML::Node s = args["scoringStrategy"];
      const std::string type = s["type"] ? s["type"].as<std::string>() : "LeastAllocated";
      if (type == "LeastAllocated") {
        m.strategy = ScoringStrategy::kLeastAllocated;
      } else if (type == "MostAllocated") {
        m.strategy = ScoringStrategy::kMostAllocated;
      } else if (type == "RequestedToCapacityRatio") {
        m.strategy = ScoringStrategy::kRequestedToCapacityRatio;
        const YAML::Node shape = s["requestedToCapacityRatio"]["shape"];
        if (!shape || shape.size() == 0)
          return Error{"NodeResourcesFit's RequestedToCapacityRatio strategy has no shape"};
        for (const auto& p : shape)
          m.shape.push_back({p["utilization"].as<int64_t>(), p["score"].as<int64_t>()});
      } else {
        return Error{"NodeResourcesFit's scoringStrategy type " + type + " is none kube-scheduler knows"};
      }
      if (s["resources"]) m.fit_resources = ResourcesOf(s["resources"]);
    }
  }
  for (const auto& e : root["extenders"]) {
    KubeSchedulerModel::Extender extender;
    for (const auto& r : e["managedResources"]) extender.managed_resources.push_back(r["name"].as<std::string>());
    if (e["filterVerb"]) extender.filter_verb = e["filterVerb"].as<std::string>();
    m.extenders.push_back(std::move(extender));
  }
  return m;
}

}  // namespace

bool KubeSchedulerModel::ExtenderDecides(const std::vector<std::string>& mgpu_resources) const {
  for (const Extender& e : extenders) {
    bool interested = e.managed_resources.empty();
    for (const std::string& r : mgpu_resources)
      interested |= std::find(e.managed_resources.begin(), e.managed_resources.end(), r) !=
                    e.managed_resources.end();
    if (interested && (e.filter_verb != "choose-cpu-only" || mgpu_resources.empty())) return true;
  }
  return false;
}

int32_t KubeSchedulerModel::NumFeasibleNodesToFind(int32_t num_nodes) const {
  return NumFeasibleNodesToFind(num_nodes, percentage_of_nodes_to_score);
}

Result<int32_t> KubeSchedulerModel::PercentageOf(const std::string& profile) const {
  const auto it = profile_percentages.find(profile);
  if (it == profile_percentages.end())
    return Error{"the scheduler configuration has no profile named " + profile};
  return it->second;
}

int32_t KubeSchedulerModel::NumFeasibleNodesToFind(int32_t num_nodes, int32_t percentage) {
  if (num_nodes < kMinFeasibleNodesToFind) return num_nodes;
  if (percentage == 0) percentage = std::max(50 - num_nodes / 125, kMinFeasibleNodesPercentageToFind);
  const int32_t n = num_nodes * percentage / 100;
  return std::max(n, kMinFeasibleNodesToFind);
}

// fit.go, Fit.Score through nodeResourceStrategyTypeMap's scorer for the configured strategy.
int64_t KubeSchedulerModel::FitScore(const KubeNodeView& node, const KubeAmounts& pod) const {
  std::vector<int64_t> requested, allocated, allocatable;
  AllocatableRequested(fit_resources, node, pod, /*nonzero=*/true, requested, allocated, allocatable);
  int64_t score = 0, weights = 0;
  for (size_t i = 0; i < requested.size(); ++i) {
    if (allocatable[i] == 0) continue;
    const int64_t w = fit_resources[i].weight;
    if (strategy == ScoringStrategy::kLeastAllocated) {
      score += LeastRequested(requested[i], allocatable[i]) * w;
    } else if (strategy == ScoringStrategy::kMostAllocated) {
      score += MostRequested(requested[i], allocatable[i]) * w;
    } else {
      // requested_to_capacity_ratio.go, buildRequestedToCapacityRatioScorerFunction: the shape's scores
      // times MaxNodeScore / MaxCustomPriorityScore; a resource scoring 0 does not count in the mean.
      std::vector<ShapePoint> scaled = shape;
      for (ShapePoint& p : scaled) p.score *= kMaxNodeScore / 10;
      const int64_t r = requested[i] > allocatable[i]
                            ? BrokenLinear(scaled, 100)
                            : BrokenLinear(scaled, requested[i] * 100 / allocatable[i]);
      if (r <= 0) continue;
      score += r * w;
    }
    weights += w;
  }
  if (weights == 0) return 0;
  if (strategy == ScoringStrategy::kRequestedToCapacityRatio)
    return static_cast<int64_t>(std::round(static_cast<double>(score) / static_cast<double>(weights)));
  return score / weights;
}

// balanced_allocation.go, BalancedAllocation.Score (0 for a pod requesting none of the resources) and
// balancedResourceScorer: the balance with the pod against without it, brought back to 50..100.
int64_t KubeSchedulerModel::BalancedScore(const KubeNodeView& node, const KubeAmounts& pod) const {
  bool best_effort = true;
  for (const ResourceWeight& r : balanced_resources) best_effort = best_effort && Amount(pod, r.name) == 0;
  if (best_effort) return 0;
  std::vector<int64_t> requested, allocated, allocatable;
  AllocatableRequested(balanced_resources, node, pod, /*nonzero=*/false, requested, allocated, allocatable);
  const int64_t with_pod = BalancedResourceScore(requested, allocatable);
  const int64_t without_pod = BalancedResourceScore(allocated, allocatable);
  return kMaxNodeScore / 2 + (kMaxNodeScore / 2 + with_pod - without_pod) / 2;
}

int64_t KubeSchedulerModel::Score(const KubeNodeView& node, const KubeAmounts& pod) const {
  return fit_weight * (fit_weight ? FitScore(node, pod) : 0) +
         balanced_weight * (balanced_weight ? BalancedScore(node, pod) : 0);
}

Result<KubeSchedulerModel> LoadKubeSchedulerModel(const std::string& path) {
  try {
    return Parse(YAML::LoadFile(path));
  } catch (const std::exception& e) {
    return Error{"cannot read the scheduler configuration " + path + ": " + e.what()};
  }
}

std::vector<size_t> NodeSampler::Sample(size_t num_nodes, size_t to_find,
                                        const std::function<bool(size_t)>& fits) {
  std::vector<size_t> found;
  if (num_nodes == 0) return found;
  size_t processed = 0;
  for (size_t k = 0; k < num_nodes; ++k) {
    const size_t i = (next_start_ + k) % num_nodes;
    if (!fits(i)) {
      ++processed;  // a filter's status recorded for it
      continue;
    }
    if (found.size() == to_find) break;  // one feasible node too many: the search is cancelled
    found.push_back(i);
    ++processed;
  }
  next_start_ = (next_start_ + processed) % num_nodes;
  return found;
}

size_t TopScoredNode(const std::vector<int64_t>& scores) {
  // container/heap's Init (down from n/2-1 to 0) with nodeScoreHeap.Less: higher score first, equal scores
  // never less than each other (every Randomizer 0). Pop returns what Init left at the root.
  const size_t n = scores.size();
  std::vector<size_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = i;
  const auto less = [&](size_t a, size_t b) { return scores[h[a]] > scores[h[b]]; };
  for (size_t i0 = n / 2; i0-- > 0;) {
    size_t i = i0;
    for (;;) {
      const size_t j1 = 2 * i + 1;
      if (j1 >= n) break;
      size_t j = j1;
      if (j1 + 1 < n && less(j1 + 1, j1)) j = j1 + 1;
      if (!less(j, i)) break;
      std::swap(h[i], h[j]);
      i = j;
    }
  }
  return n == 0 ? SIZE_MAX : h[0];
}

}  // namespace mgpu::bench
