#include "common/filter.h"

namespace mgpu {

FilterVerdicts FilterPod(const ClusterView& view, const std::vector<std::string>& names,
                         const Result<PodRequest>& pod, ModelPublisher& model, DecisionMemo& memo,
                         const Config& config) {
  FilterVerdicts result;
  if (!pod.ok()) {
    const std::string reason = "invalid mgpu request: " + pod.message();
    for (const std::string& n : names) result.unresolvable[n] = reason;
    return result;
  }
  result.passed.reserve(names.size());
  if (!pod->AsksForGpu()) {
    for (size_t i = 0; i < names.size(); ++i) result.passed.push_back(i);
    return result;
  }
  const ModelPublisher::Published published = model.Observe(*pod, [&view] { return view.Free(); });
  const std::vector<const NodeView*> nodes = view.Usable(names);
  const std::string no_plugin = "no mgpu-device-plugin (no " + config.Names().gpu_inventory + " annotation)";
  const std::string dra_node = "cards served through DRA (" + config.Names().gpu_dra_inventory + ")";
  const std::vector<NodeDecision> decisions =
      memo.Decide(view, nodes, *pod, published.model.get(), published.version, /*with_reasons=*/true);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (decisions[i].fits) {
      result.passed.push_back(i);
    } else if (nodes[i]) {
      result.failed[name] = decisions[i].reason;
      ++result.insufficient;
    } else if (const NodeView* other = view.Find(name); other && other->problem.empty()) {
      result.failed[name] = dra_node;  // Usable leaves out only these
      ++result.no_inventory;
    } else if (other) {
      result.failed[name] = other->reason;
      ++result.bad_inventory;
    } else {
      result.failed[name] = no_plugin;
      ++result.no_inventory;
    }
  }
  return result;
}

}  // namespace mgpu
