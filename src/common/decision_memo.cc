#include "common/decision_memo.h"

#include "common/allocator.h"

namespace mgpu {
namespace {

bool UsesModel(const PodRequest& pod) {
  return pod.card_policy == CardPolicy::kFragmentation || pod.node_policy == NodePolicy::kFragmentation;
}

bool BindWouldWait(const NodeView& node, const PodRequest& pod, const std::string& uid,
                   const WorkloadModel* model) {
  std::string conflict;
  return ChooseUnambiguous(node, pod, uid, model, conflict).ok() && !conflict.empty();
}

// Whether pod `uid` is itself among the pods waiting on `node` (ChooseUnambiguous passes over it).
bool IsWaiting(const NodeView& node, const std::string& uid) {
  for (size_t index : node.waiting)
    if (node.pods[index].uid == uid) return true;
  return false;
}

}  // namespace

std::string ShapeKey(const PodRequest& pod) {
  std::string key;
  const auto add = [&key](int64_t v) {
    key += std::to_string(v);
    key += ',';
  };
  add(static_cast<int>(pod.qos));
  add(pod.dedicated);
  add(static_cast<int>(pod.compute_policy));
  add(static_cast<int>(pod.card_policy));
  add(static_cast<int>(pod.node_policy));
  add(pod.cpu_milli);
  add(pod.host_memory_mib);
  for (const ContainerRequest& c : pod.containers) {
    key += '|';
    key += c.name;  // the reason a node does not fit names the container
    key += ',';
    add(c.core);
    add(c.reclaimed_core);
    add(c.memory_mib);
    add(c.card_count);
  }
  return key;
}

std::vector<NodeDecision> DecisionMemo::Decide(const ClusterView& view,
                                               const std::vector<const NodeView*>& nodes,
                                               const PodRequest& pod, const WorkloadModel* model,
                                               uint64_t model_version, bool with_reasons,
                                               const std::string* waits_for) {
  std::vector<NodeDecision> out(nodes.size());
  Placement placed;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i]) continue;
      out[i] = mgpu::Decide(nodes[i]->state, pod, model, with_reasons, placed);
      if (waits_for && out[i].fits && !nodes[i]->waiting.empty())
        out[i].waits = BindWouldWait(*nodes[i], pod, *waits_for, model);
    }
    return out;
  }
  std::string shape = ShapeKey(pod);
  if (UsesModel(pod)) shape += "model" + std::to_string(model_version);
  auto table = tables_.begin();
  while (table != tables_.end() && table->shape != shape) ++table;
  if (table == tables_.end()) {
    if (tables_.size() == kShapes) tables_.pop_back();
    tables_.push_front(Table{std::move(shape), {}});
  } else {
    tables_.splice(tables_.begin(), tables_, table);
  }
  std::vector<Remembered>& memo = tables_.front().by_slot;
  if (memo.size() < view.SlotCount()) memo.resize(view.SlotCount());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeView* node = nodes[i];
    if (!node) continue;
    Remembered& r = memo[node->slot];
    // A decision made without its reason (by prioritize) is made again when the reason is wanted.
    const bool lacks_reason = with_reasons && !r.decision.fits && r.decision.reason.empty();
    if (r.generation != node->generation || lacks_reason)
      r = Remembered{node->generation, mgpu::Decide(node->state, pod, model, with_reasons, placed)};
    out[i] = r.decision;
    if (!waits_for || !r.decision.fits || node->waiting.empty() || r.waits == 0) continue;
    const bool self = IsWaiting(*node, *waits_for);
    if (r.waits == 1 && !self) {
      out[i].waits = true;
      continue;
    }
    out[i].waits = BindWouldWait(*node, pod, *waits_for, model);
    if (!self) r.waits = out[i].waits;
  }
  return out;
}

void DecisionMemo::Clear() {
  std::lock_guard lock(mu_);
  tables_.clear();
}

}  // namespace mgpu
