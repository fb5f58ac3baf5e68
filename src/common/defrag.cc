#include "common/defrag.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/allocator.h"
#include "common/scheduler.h"

namespace mgpu {
namespace {

// Plans tried at most, fewest moves first: each costs a pass over the nodes per moved pod.
constexpr size_t kPlansTried = 32;

// The pod's GPU share as the plan weighs moves: core and reclaimed core over all its cards.
int ShareOf(const PodRequest& pod) {
  int share = 0;
  for (const ContainerRequest& c : pod.containers) share += c.core + c.reclaimed_core;
  return share;
}

void TakeHost(NodeState& node, const PodRequest& pod, int64_t sign) {
  if (node.cpu_free_milli >= 0) node.cpu_free_milli -= sign * pod.cpu_milli;
  if (node.host_memory_free_mib >= 0) node.host_memory_free_mib -= sign * pod.host_memory_mib;
}

// The nodes as a plan changes them: the changed ones copied, the others read where they are.
class Overlay {
 public:
  explicit Overlay(const std::vector<const NodeState*>& nodes) : nodes_(nodes) {}
  const NodeState& Get(size_t i) const {
    auto it = changed_.find(i);
    return it == changed_.end() ? *nodes_[i] : it->second;
  }
  NodeState& Change(size_t i) { return changed_.try_emplace(i, *nodes_[i]).first->second; }

 private:
  const std::vector<const NodeState*>& nodes_;
  std::map<size_t, NodeState> changed_;
};

bool Fits(const NodeState& node, const PodRequest& pod, const WorkloadModel* model, Placement& scratch) {
  return HostAdmits(node, pod) && Place(node, pod, model, scratch);
}

// Where `pod` goes among `nodes` as its node policy prefers (the lowest cost), or nodes.size().
size_t Preferred(const Overlay& nodes, size_t count, const PodRequest& pod, const WorkloadModel* model,
                 Placement& scratch) {
  size_t best = count;
  double best_cost = INFINITY;
  for (size_t i = 0; i < count; ++i) {
    const NodeState& node = nodes.Get(i);
    if (!HostAdmits(node, pod)) continue;
    const NodeDecision d = Decide(node, pod, model, /*with_reason=*/false, scratch);
    if (d.fits && d.cost < best_cost) best = i, best_cost = d.cost;
  }
  return best;
}

// Puts `pod` on node `i` on the cards its card policy chooses; false when they do not take it.
bool PutOn(Overlay& nodes, size_t i, const PodRequest& pod, const WorkloadModel* model, Assignment& cards) {
  Result<Assignment> chosen = ChooseCards(nodes.Get(i), pod, model);
  if (!chosen.ok()) return false;
  NodeState& node = nodes.Change(i);
  if (!Apply(node, pod, *chosen).ok()) return false;
  TakeHost(node, pod, 1);
  cards = std::move(*chosen);
  return true;
}

// A node with the movable pods that must leave it for the pod to fit.
struct Candidate {
  size_t node;
  NodeState without;          // the node with only those pods gone
  std::vector<size_t> moved;  // indexes into the movable pods, hardest to place first
  int moved_share = 0;
};

}  // namespace

bool HostAdmits(const NodeState& node, const PodRequest& pod) {
  if (!pod.gpu_models.empty() &&
      std::find(pod.gpu_models.begin(), pod.gpu_models.end(), node.product) == pod.gpu_models.end())
    return false;
  if (node.cpu_free_milli >= 0 && node.cpu_free_milli < pod.cpu_milli) return false;
  return node.host_memory_free_mib < 0 || node.host_memory_free_mib >= pod.host_memory_mib;
}

std::string NoNodeCouldHold(const std::vector<const NodeState*>& nodes, const PodRequest& pod) {
  std::map<std::string, size_t> reasons;  // the emptied nodes' reasons, with how many nodes give each
  size_t usable = 0;
  Placement scratch;
  for (const NodeState* node : nodes) {
    NodeState empty = *node;
    for (CardState& card : empty.cards) card.usage = CardUsage{};
    empty.cpu_free_milli = empty.host_memory_free_mib = -1;
    if (!HostAdmits(empty, pod)) continue;
    ++usable;
    if (Place(empty, pod, nullptr, scratch)) return "";
    ++reasons[SchedulerReason(empty, pod, scratch)];
  }
  if (usable == 0) {
    std::string models;
    for (const std::string& m : pod.gpu_models) models += (models.empty() ? "" : ", ") + m;
    return models.empty() ? "no node has mgpu cards pod " + pod.Key() + " may use"
                          : "no node has a GPU model pod " + pod.Key() + " may use (" + models + ")";
  }
  std::string out = (usable == 1 ? "the one node" : "the " + std::to_string(usable) + " nodes") + " pod " +
                    pod.Key() + " may use could not hold it even with no other pod on " +
                    (usable == 1 ? "it: " : "them: ");
  bool first = true;
  for (const auto& [reason, count] : reasons) {
    out += (first ? "" : ", ") + (reasons.size() > 1 ? std::to_string(count) + " " : "") + reason;
    first = false;
  }
  return out;
}

std::string FreeCapacityShortfall(const std::vector<const NodeState*>& nodes, const PodRequest& pod) {
  const bool offline = pod.qos == Qos::kOffline;
  int64_t core = 0, memory = 0, cpu = 0, host_memory = 0;
  bool cpu_known = true, host_memory_known = true;
  for (const NodeState* node : nodes) {
    if (!pod.gpu_models.empty() &&
        std::find(pod.gpu_models.begin(), pod.gpu_models.end(), node->product) == pod.gpu_models.end())
      continue;
    for (const CardState& card : node->cards) {
      if (!card.card.healthy || card.usage.exclusive_holders > 0) continue;
      core += offline ? card.FreeReclaimedCore() : card.FreeCore();
      memory += card.FreeMemoryMiB();
    }
    cpu_known &= node->cpu_free_milli >= 0;
    host_memory_known &= node->host_memory_free_mib >= 0;
    cpu += std::max<int64_t>(0, node->cpu_free_milli);
    host_memory += std::max<int64_t>(0, node->host_memory_free_mib);
  }
  int64_t want_core = 0, want_memory = 0;
  for (const ContainerRequest& c : pod.containers) {
    want_core += offline ? c.reclaimed_core : c.core;
    want_memory += c.memory_mib;
  }
  const std::string where = "the nodes pod " + pod.Key() + " may use have ";
  const std::string kind = offline ? " percent reclaimed core" : " percent core";
  if (core < want_core)
    return where + std::to_string(core) + kind + " free in all, it asks for " + std::to_string(want_core);
  if (memory < want_memory)
    return where + std::to_string(memory) + " MiB of card memory free in all, it asks for " +
           std::to_string(want_memory);
  if (cpu_known && cpu < pod.cpu_milli)
    return where + std::to_string(cpu) + " millicores of CPU free in all, it asks for " +
           std::to_string(pod.cpu_milli);
  if (host_memory_known && host_memory < pod.host_memory_mib)
    return where + std::to_string(host_memory) + " MiB of memory free in all, it asks for " +
           std::to_string(pod.host_memory_mib);
  return "";
}

Result<DefragPlan> PlanDefrag(const std::vector<const NodeState*>& nodes,
                              const std::vector<MovablePod>& movable, const PodRequest& pod,
                              const WorkloadModel* model) {
  Placement scratch;
  Overlay overlay(nodes);
  if (size_t i = Preferred(overlay, nodes.size(), pod, model, scratch); i < nodes.size()) {
    DefragPlan plan;
    plan.node = i;
    if (!PutOn(overlay, i, pod, model, plan.cards))
      return Error{"node " + nodes[i]->name + " refused pod " + pod.Key()};
    return plan;
  }
  std::vector<std::vector<size_t>> on_node(nodes.size());
  for (size_t m = 0; m < movable.size(); ++m)
    if (movable[m].node < nodes.size() && movable[m].request.Key() != pod.Key())
      on_node[movable[m].node].push_back(m);

  // Every node the pod fits once its movable pods are gone, with those that may stay put back.
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (on_node[i].empty()) continue;
    Candidate c{i, *nodes[i], {}, 0};
    bool released = true;
    for (size_t m : on_node[i]) {
      released &= Release(c.without, movable[m].request, movable[m].assignment).ok();
      TakeHost(c.without, movable[m].request, -1);
    }
    if (!released || !Fits(c.without, pod, model, scratch)) continue;
    std::vector<size_t> order = on_node[i];
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return ShareOf(movable[a].request) < ShareOf(movable[b].request);
    });
    for (size_t m : order) {
      NodeState with = c.without;
      TakeHost(with, movable[m].request, 1);
      if (Apply(with, movable[m].request, movable[m].assignment).ok() && Fits(with, pod, model, scratch)) {
        c.without = std::move(with);
      } else {
        c.moved.push_back(m);
        c.moved_share += ShareOf(movable[m].request);
      }
    }
    std::reverse(c.moved.begin(), c.moved.end());  // the largest first
    candidates.push_back(std::move(c));
  }
  if (candidates.empty())
    return Error{"pod " + pod.Key() + " fits no node even with every offline pod moved off it"};
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.moved.size() != b.moved.size()) return a.moved.size() < b.moved.size();
    return a.moved_share < b.moved_share;
  });

  std::string stuck;
  for (size_t k = 0; k < candidates.size() && k < kPlansTried; ++k) {
    Candidate& c = candidates[k];
    Overlay plan_nodes(nodes);
    plan_nodes.Change(c.node) = c.without;
    DefragPlan plan;
    plan.node = c.node;
    if (!PutOn(plan_nodes, c.node, pod, model, plan.cards)) continue;
    bool placed = true;
    for (size_t m : c.moved) {
      const MovablePod& mover = movable[m];
      const size_t to = Preferred(plan_nodes, nodes.size(), mover.request, model, scratch);
      DefragMove move{mover.key, c.node, to, {}};
      if (to == nodes.size() || !PutOn(plan_nodes, to, mover.request, model, move.cards)) {
        if (stuck.empty()) stuck = mover.key;
        placed = false;
        break;
      }
      plan.moves.push_back(std::move(move));
    }
    if (placed) return plan;
  }
  return Error{"moving offline pods would make room for pod " + pod.Key() + " on " +
               std::to_string(candidates.size()) + " node(s), but " +
               (stuck.empty() ? std::string("no node took it then")
                              : stuck + ", which would have to move, fits nowhere else")};
}

}  // namespace mgpu
