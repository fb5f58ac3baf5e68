#include "deviceplugin/node_pods.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/codec.h"

namespace mgpu::dp {
namespace {

using nlohmann::json;

// The container holds some device of `resource` in the kubelet's answer.
bool Holds(const Assignment* pod, const std::string& container, Resource resource, const Config& config) {
  const ContainerAssignment* c = pod ? pod->Find(container) : nullptr;
  if (!c) return false;
  return std::any_of(c->cards.begin(), c->cards.end(),
                     [&](const CardShare& s) { return DevicesOf(s, resource, config) > 0; });
}

// Devices of `resource` over a container's assigned cards; -1 when a share is not whole devices.
int64_t AssignedDevices(const ContainerAssignment& c, Resource resource, const Config& config) {
  int64_t total = 0;
  for (const CardShare& s : c.cards) {
    const int64_t n = DevicesOf(s, resource, config);
    if (n < 0) return -1;
    total += n;
  }
  return total;
}

}  // namespace

NodePod NodePodOf(PodFacts facts) {
  NodePod out;
  out.key = std::move(facts.key);
  out.uid = std::move(facts.uid);
  out.resource_version = std::move(facts.resource_version);
  out.active = !facts.finished && !facts.deleting;
  out.started = std::move(facts.started);
  if (facts.request.ok()) {
    out.containers = std::move(facts.request->containers);
    out.shape = std::move(*facts.request);
  } else {
    out.problems.push_back(facts.request.message());
  }
  out.assignment = std::move(facts.assignment);
  out.allocated = std::move(facts.allocated);
  out.assume_time_ns = facts.assume_time_ns;
  out.problems.insert(out.problems.end(), facts.problems.begin(), facts.problems.end());
  return out;
}

NodePod ReadNodePod(const json& pod, const Config& config, const Annotations& workload) {
  return NodePodOf(ReadPod(pod, config, workload));
}

Pending FindPending(const std::vector<NodePod>& pods, Resource resource, int64_t size,
                    const AllocatedPods& allocated, const HandedOutCards& handed_out, const Config& config) {
  Pending out;
  struct Pool {
    std::vector<PoolMember> members;
    std::vector<PendingContainer> containers;  // parallel; cards are set for those offered
  };
  std::map<std::string, Pool> pools;
  for (const NodePod& pod : pods) {
    if (!pod.active) continue;
    auto held = allocated.find(pod.key);
    const Assignment* truth = held == allocated.end() ? nullptr : &held->second;
    // The container's place in the pod's spec, else in the assignment.
    const auto order = [&](const std::string& container, int fallback) {
      if (!pod.containers) return fallback;
      auto it = std::find_if(pod.containers->begin(), pod.containers->end(),
                             [&](const ContainerRequest& c) { return c.name == container; });
      return it == pod.containers->end() ? fallback : static_cast<int>(it - pod.containers->begin());
    };
    if (pod.assignment) {
      const auto& containers = pod.assignment->containers;
      for (size_t i = 0; i < containers.size(); ++i) {
        const ContainerAssignment& c = containers[i];
        const int64_t devices = AssignedDevices(c, resource, config);
        if (devices <= 0) continue;
        const int place = order(c.container, static_cast<int>(i));
        // A container whose request is unreadable is a pool of its own.
        const bool known = pod.containers && place < static_cast<int>(pod.containers->size()) &&
                           (*pod.containers)[place].name == c.container;
        const std::string key = known ? LookAlikeKey(pod.shape, (*pod.containers)[place])
                                      : "(unreadable) " + pod.uid + "/" + c.container;
        PoolMember member{CardSetOf(c), std::nullopt, pod.assume_time_ns};
        if (Holds(truth, c.container, resource, config)) {
          ContainerAssignment mine = *truth->Find(c.container);
          std::erase_if(mine.cards, [&](const CardShare& s) { return DevicesOf(s, resource, config) <= 0; });
          member.holding = CardSetOf(mine);
        } else if (auto h = handed_out.find(HandedOut{pod.uid, c.container, resource}); h != handed_out.end()) {
          member.holding = h->second;
        } else if (pod.started.count(c.container)) {
          member.holding = member.assigned;  // admitted long ago, whatever the kubelet lists
        }
        out.explained |= !member.holding && devices == size;
        Pool& pool = pools[key];
        pool.members.push_back(std::move(member));
        pool.containers.push_back(
            PendingContainer{pod.key, c.container, c.cards, pod.assume_time_ns, pod.uid, place});
      }
    } else if (pod.containers) {
      for (const ContainerRequest& c : *pod.containers) {
        const bool waits = !pod.started.count(c.name) && !Holds(truth, c.name, resource, config) &&
                           !handed_out.count(HandedOut{pod.uid, c.name, resource});
        out.explained |= DevicesOf(c, resource, config) == size && waits;
      }
    }
  }
  for (auto& [key, pool] : pools) {
    const std::vector<std::optional<CardSet>> held = HoldFromPool(pool.members);
    for (size_t k = 0; k < held.size(); ++k) {
      if (pool.members[k].holding || !held[k]) continue;
      PendingContainer candidate = std::move(pool.containers[k]);
      candidate.pool_size = static_cast<int>(pool.members.size());
      if (*held[k] != pool.members[k].assigned) {  // another member's cards, same amounts per card
        const CardShare amounts = candidate.cards.front();
        candidate.cards.clear();
        for (const std::string& uuid : *held[k])
          candidate.cards.push_back(CardShare{uuid, amounts.core, amounts.reclaimed_core, amounts.memory_mib});
      }
      out.candidates.push_back(std::move(candidate));
    }
  }
  return out;
}

bool WithinPool(const std::vector<NodePod>& pods, const NodePod& pod, const ContainerAssignment& held) {
  auto c = pod.containers ? std::find_if(pod.containers->begin(), pod.containers->end(),
                                         [&](const ContainerRequest& r) { return r.name == held.container; })
                          : std::vector<ContainerRequest>::const_iterator();
  if (!pod.containers || c == pod.containers->end()) return false;
  const std::string key = LookAlikeKey(pod.shape, *c);
  const CardSet cards = CardSetOf(held);
  for (const NodePod& other : pods) {
    if (!other.assignment || !other.containers) continue;
    for (const ContainerRequest& r : *other.containers) {
      const ContainerAssignment* assigned = other.assignment->Find(r.name);
      if (assigned && CardSetOf(*assigned) == cards && LookAlikeKey(other.shape, r) == key) return true;
    }
  }
  return false;
}

bool AllocationComplete(const NodePod& pod, const Assignment& truth) {
  if (truth.containers.empty()) return false;
  if (!pod.containers) return true;
  for (const ContainerRequest& c : *pod.containers) {
    if (c.init) continue;
    const ContainerAssignment* held = truth.Find(c.name);
    if (!held) return false;
    CardShare total;
    for (const CardShare& s : held->cards) {
      total.core += s.core;
      total.reclaimed_core += s.reclaimed_core;
      total.memory_mib += s.memory_mib;
    }
    if (total.core != c.core || total.reclaimed_core != c.reclaimed_core || total.memory_mib != c.memory_mib)
      return false;
  }
  return true;
}

Assignment Normalized(Assignment assignment) {
  auto& containers = assignment.containers;
  for (ContainerAssignment& c : containers) {
    std::sort(c.cards.begin(), c.cards.end(),
              [](const CardShare& a, const CardShare& b) { return a.uuid < b.uuid; });
  }
  std::sort(
      containers.begin(), containers.end(),
      [](const ContainerAssignment& a, const ContainerAssignment& b) { return a.container < b.container; });
  return assignment;
}

}  // namespace mgpu::dp
