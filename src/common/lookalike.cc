#include "common/lookalike.h"

#include <algorithm>
#include <map>
#include <string_view>

namespace mgpu {

std::string LookAlikeKey(const PodRequest& pod, const ContainerRequest& c) {
  return std::to_string(c.core) + "/" + std::to_string(c.reclaimed_core) + "/" + std::to_string(c.memory_mib) +
         "/" + std::to_string(c.card_count) + "/" + std::string(Name(pod.qos)) + "/" +
         std::string(Name(pod.compute_policy)) + (pod.dedicated ? "/dedicated" : "");
}

CardSet CardSetOf(const ContainerAssignment& container) {
  CardSet out;
  out.reserve(container.cards.size());
  for (const CardShare& s : container.cards) out.push_back(s.uuid);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::optional<CardSet>> HoldFromPool(const std::vector<PoolMember>& members) {
  std::vector<std::optional<CardSet>> out(members.size());
  // Left = A − T.
  std::vector<CardSet> left;
  left.reserve(members.size());
  for (const PoolMember& m : members) left.push_back(m.assigned);
  std::sort(left.begin(), left.end());
  const auto take = [&](const CardSet& item) {
    auto it = std::lower_bound(left.begin(), left.end(), item);
    if (it == left.end() || *it != item) return false;
    left.erase(it);
    return true;
  };
  std::vector<size_t> waiting;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].holding) {
      out[i] = members[i].holding;
      take(*members[i].holding);
    } else {
      waiting.push_back(i);
    }
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [&](size_t a, size_t b) { return members[a].age < members[b].age; });
  std::vector<size_t> unserved;
  for (size_t i : waiting) {
    if (take(members[i].assigned))
      out[i] = members[i].assigned;
    else
      unserved.push_back(i);
  }
  for (size_t k = 0; k < unserved.size() && k < left.size(); ++k) out[unserved[k]] = left[k];
  return out;
}

std::string UnreadablePool(const std::string& pod_uid, const std::string& container) {
  return "(unreadable) " + pod_uid + "/" + container;
}

std::vector<std::optional<CardSet>> HoldFromPools(const std::vector<PoolEntry>& entries) {
  std::map<std::string_view, std::vector<size_t>> pools;
  for (size_t i = 0; i < entries.size(); ++i) pools[entries[i].pool].push_back(i);
  std::vector<std::optional<CardSet>> out(entries.size());
  std::vector<PoolMember> members;
  for (const auto& [pool, indexes] : pools) {
    members.clear();
    for (size_t i : indexes) members.push_back(entries[i].member);
    const std::vector<std::optional<CardSet>> held = HoldFromPool(members);
    for (size_t k = 0; k < indexes.size(); ++k) out[indexes[k]] = held[k];
  }
  return out;
}

}  // namespace mgpu
