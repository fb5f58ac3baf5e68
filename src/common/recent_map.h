// The latest `capacity` entries by key (a pod's uid), the oldest dropped first when a new one comes, any one
// erased at once: what the extender remembers per pod (what it read of a pod, the pods its workload model
// learned) is bounded, and a deleted pod's entry goes when the pod does (Erase), not when newer pods push
// it out. Not thread-safe: its owner's mutex guards it.
#pragma once

#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>

namespace mgpu {

template <typename V>
class RecentMap {
 public:
  explicit RecentMap(size_t capacity) : capacity_(capacity) {}
  RecentMap(const RecentMap&) = delete;
  RecentMap& operator=(const RecentMap&) = delete;

  // Adds `key` as the newest entry, dropping the oldest past the capacity, and returns true; or, when it is
  // there, replaces its value (its age unchanged) and returns false.
  bool Put(const std::string& key, V value = {}) {
    if (auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      return false;
    }
    entries_.emplace_back(key, std::move(value));
    index_.emplace(entries_.back().first, std::prev(entries_.end()));
    if (entries_.size() > capacity_) Erase(entries_.front().first);
    return true;
  }
  // Null when absent.
  const V* Find(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  void Erase(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    auto entry = it->second;
    index_.erase(it);  // before the key it views goes
    entries_.erase(entry);
  }
  size_t size() const { return entries_.size(); }

 private:
  using Entries = std::list<std::pair<std::string, V>>;
  const size_t capacity_;
  Entries entries_;                                                         // oldest first
  std::unordered_map<std::string_view, typename Entries::iterator> index_;  // keys view entries_' own
};

// The latest `capacity` keys.
using RecentSet = RecentMap<std::monostate>;

}  // namespace mgpu
