#include "common/scheduler.h"

#include <algorithm>

namespace mgpu {

ClusterFree ClusterFreeOf(const std::vector<NodeState>& nodes) {
  ClusterFree out;
  out.nodes.reserve(nodes.size());
  for (const NodeState& node : nodes) out.Add(node);
  return out;
}

ModelPublisher::ModelPublisher() : published_{std::make_shared<const WorkloadModel>(), 0} {}

ModelPublisher::Published ModelPublisher::Observe(const PodRequest& pod,
                                                  const std::function<ClusterFree()>& cluster_free) {
  std::lock_guard lock(mu_);
  if (!pod.AsksForGpu()) return published_;
  if (!pod.uid.empty()) {
    if (!learned_.Put(pod.uid)) return published_;
  }
  learning_.Learn(pod);
  if (++unpublished_ >= kPublishEvery || published_.model->Empty()) {
    learning_.SetClusterFree(cluster_free ? cluster_free() : ClusterFree{});
    published_ = Published{std::make_shared<const WorkloadModel>(learning_), published_.version + 1};
    unpublished_ = 0;
  }
  return published_;
}

ModelPublisher::Published ModelPublisher::Current() const {
  std::lock_guard lock(mu_);
  return published_;
}

void ModelPublisher::Forget(const std::string& uid) {
  std::lock_guard lock(mu_);
  learned_.Erase(uid);
}

Result<Assignment> Assign(NodeState& node, const PodRequest& pod, const WorkloadModel* model) {
  Result<Assignment> chosen = ChooseCards(node, pod, model);
  if (!chosen.ok()) return chosen;
  if (Status applied = Apply(node, pod, *chosen); !applied.ok()) return Error{applied.message()};
  return chosen;
}

Result<Scheduled> ScheduleOne(const std::vector<NodeState*>& nodes, const PodRequest& pod,
                              ModelPublisher& publisher, const std::function<ClusterFree()>& cluster_free,
                              bool with_reasons, const std::function<size_t(size_t)>& pick,
                              Placement& scratch) {
  Scheduled out;
  const ModelPublisher::Published model = publisher.Observe(pod, cluster_free);
  out.decisions.reserve(nodes.size());
  for (const NodeState* node : nodes)
    out.decisions.push_back(Decide(*node, pod, model.model.get(), with_reasons, scratch));
  std::vector<int> scores;
  if (pod.AsksForGpu()) {
    scores = Scores(out.decisions);
  } else {
    std::vector<bool> has_cards;  // a node without cards counts only where the pod fits
    for (size_t i = 0; i < nodes.size(); ++i)
      has_cards.push_back(!nodes[i]->cards.empty() || !out.decisions[i].fits);
    scores = CpuOnlyScores(out.decisions, has_cards);
  }
  std::vector<size_t> best;
  int best_score = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!out.decisions[i].fits || scores[i] < best_score) continue;
    if (scores[i] > best_score) best.clear();
    best_score = scores[i];
    best.push_back(i);
  }
  if (best.empty()) return out;
  out.node = best[pick(best.size())];
  if (!pod.AsksForGpu()) return out;
  Result<Assignment> assignment = Assign(*nodes[out.node], pod, model.model.get());
  if (!assignment.ok())
    return Error{"node " + nodes[out.node]->name + " refused its own choice: " + assignment.message()};
  out.assignment = std::move(*assignment);
  return out;
}

std::vector<int> CpuOnlyScores(const std::vector<NodeDecision>& decisions, const std::vector<bool>& has_cards) {
  if (std::find(has_cards.begin(), has_cards.end(), false) == has_cards.end()) return Scores(decisions);
  std::vector<int> out(has_cards.size(), 0);
  for (size_t i = 0; i < has_cards.size(); ++i)
    if (!has_cards[i]) out[i] = 10;
  return out;
}

}  // namespace mgpu
