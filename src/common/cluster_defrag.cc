#include "common/cluster_defrag.h"

#include <utility>

namespace mgpu {
namespace {

// The cause other than fragmentation that keeps `pod` off `nodes` (kNever or kShort) and its sentence, or
// kFits and no sentence when there is none.
std::pair<Unblocking::Cause, std::string> OtherCause(const std::vector<const NodeState*>& nodes,
                                                     const PodRequest& pod) {
  if (std::string never = NoNodeCouldHold(nodes, pod); !never.empty())
    return {Unblocking::Cause::kNever, std::move(never)};
  if (std::string short_of = FreeCapacityShortfall(nodes, pod); !short_of.empty())
    return {Unblocking::Cause::kShort, std::move(short_of)};
  return {Unblocking::Cause::kFits, ""};
}

}  // namespace

std::string ShortfallIn(const ClusterView& view, const PodRequest& pod) {
  std::vector<const NodeState*> states;
  for (const NodeView* node : view.Nodes())
    if (node->problem.empty()) states.push_back(&node->state);
  return OtherCause(states, pod).second;
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
  if (auto [cause, sentence] = OtherCause(states, pod); cause != Unblocking::Cause::kFits) {
    out.cause = cause;
    out.sentence = std::move(sentence);
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
