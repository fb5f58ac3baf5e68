#include "common/cluster_defrag.h"

namespace mgpu {

std::string ShortfallIn(const ClusterView& view, const PodRequest& pod) {
  std::vector<const NodeState*> states;
  for (const NodeView* node : view.Nodes())
    if (node->problem.empty()) states.push_back(&node->state);
  return FreeCapacityShortfall(states, pod);
}

Unblocking Diagnose(const ClusterView& view, const PodRequest& pod, const WorkloadModel* model) {
  Unblocking out;
  std::vector<const NodeState*> states;
  std::vector<MovablePod> offline;
  for (const NodeView* node : view.Nodes()) {
    if (!node->problem.empty()) continue;
    const size_t index = out.nodes.size();
    out.nodes.push_back(node);
    states.push_back(&node->state);
    for (const PlacedPod& placed : node->pods)
      if (placed.request.qos == Qos::kOffline)
        offline.push_back(MovablePod{placed.key, index, placed.request, placed.assignment});
  }
  Result<DefragPlan> fits = PlanDefrag(states, {}, pod, model);
  if (fits.ok()) {
    out.plan = std::move(*fits);
    return out;
  }
  if (std::string short_of = FreeCapacityShortfall(states, pod); !short_of.empty()) {
    out.cause = Unblocking::Cause::kShort;
    out.sentence = std::move(short_of);
    return out;
  }
  out.cause = Unblocking::Cause::kFragmentation;
  Result<DefragPlan> plan = PlanDefrag(states, offline, pod, model);
  if (plan.ok())
    out.plan = std::move(*plan);
  else
    out.sentence = plan.message();
  return out;
}

}  // namespace mgpu
