#include "common/cluster_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/allocator.h"
#include "common/clock.h"
#include "common/lookalike.h"

namespace mgpu {
namespace {

std::set<std::string> CardsOf(const ContainerAssignment* container) {
  std::set<std::string> out;
  if (container)
    for (const CardShare& s : container->cards) out.insert(s.uuid);
  return out;
}

// What each pod on a node counts (common/lookalike.h): a pod with D/gpu-allocated that; any other (waiting,
// or admitted without one), per container, what its look-alike pool holds for it.
std::vector<PlacedPod> CountedOnNode(const std::vector<const PlacedPod*>& placed) {
  std::vector<PlacedPod> out;
  out.reserve(placed.size());
  std::vector<PoolEntry> entries;
  // Parallel to entries: the pod's place in `out`, and the container.
  std::vector<std::pair<size_t, const ContainerRequest*>> refs;
  for (const PlacedPod* p : placed) {
    out.push_back(*p);
    if (!p->assigned) continue;  // allocated without the extender: counted as it is
    for (const ContainerRequest& c : p->request.containers) {
      const ContainerAssignment* assigned = p->assigned->Find(c.name);
      if (!assigned) continue;
      PoolMember member{CardSetOf(*assigned), std::nullopt, p->assume_ns};
      if (p->confirmed) {
        const ContainerAssignment* held = p->assignment.Find(c.name);
        if (!held) continue;  // an init container the kubelet does not list: not in the pool
        member.holding = CardSetOf(*held);
      }
      entries.push_back(PoolEntry{p->readable ? LookAlikeKey(p->request, c) : UnreadablePool(p->uid, c.name),
                                  std::move(member)});
      refs.emplace_back(out.size() - 1, &c);
    }
  }
  const std::vector<std::optional<CardSet>> held = HoldFromPools(entries);
  std::vector<bool> rebuilt(out.size(), false);
  for (size_t k = 0; k < held.size(); ++k) {
    const auto [i, c] = refs[k];
    if (out[i].confirmed) continue;
    if (!rebuilt[i]) {
      out[i].assignment.containers.clear();
      rebuilt[i] = true;
    }
    if (!held[k]) continue;  // nothing left in the pool: see common/lookalike.h
    ContainerAssignment container{c->name, {}};
    for (const std::string& uuid : *held[k])
      container.cards.push_back(
          CardShare{uuid, c->CorePerCard(), c->ReclaimedCorePerCard(), c->MemoryPerCardMiB()});
    out[i].assignment.containers.push_back(std::move(container));
  }
  return out;
}

// What a pod whose request does not parse is counted as asking: each container what `held` gives it (its
// cards' amounts, equal per card), offline when it holds reclaimed core, under the default compute policy.
PodRequest HeldRequest(const PodFacts& pod, const Assignment& held, const Config& config) {
  PodRequest out;
  const size_t slash = pod.key.find('/');
  out.namespace_name = pod.key.substr(0, slash);
  out.name = slash == std::string::npos ? pod.key : pod.key.substr(slash + 1);
  out.uid = pod.uid;
  out.cpu_milli = pod.host.cpu_milli;
  out.host_memory_mib = pod.host.memory_mib;
  out.compute_policy = config.default_compute_policy;
  for (const ContainerAssignment& ca : held.containers) {
    if (ca.cards.empty()) continue;
    const CardShare& each = ca.cards.front();
    const int n = static_cast<int>(ca.cards.size());
    out.containers.push_back(ContainerRequest{ca.container, false, each.core * n, each.reclaimed_core * n,
                                              each.memory_mib * n, n});
    if (each.reclaimed_core > 0) out.qos = Qos::kOffline;
  }
  return out;
}

// Why binding `pod` with `assignment` next to the node's waiting pods would let the device plugin confuse
// two containers (DESIGN §5.5): one that is not a look-alike asks the same size of some resource on other
// cards. Empty when there is no such pair.
std::string Ambiguity(const NodeView& node, const PodRequest& pod, const std::string& uid,
                      const Assignment& assignment) {
  struct Size {
    const char* resource;
    int64_t (*of)(const ContainerRequest&);
  };
  static const Size kSizes[] = {
      {"mgpu-core", [](const ContainerRequest& c) -> int64_t { return c.core; }},
      {"reclaimed-mgpu-core", [](const ContainerRequest& c) -> int64_t { return c.reclaimed_core; }},
      {"mgpu-memory", [](const ContainerRequest& c) -> int64_t { return c.memory_mib; }},
  };
  for (size_t index : node.waiting) {
    const PlacedPod& other = node.pods[index];
    if (other.uid == uid) continue;
    for (const ContainerRequest& mine : pod.containers) {
      const std::set<std::string> my_cards = CardsOf(assignment.Find(mine.name));
      const std::string my_shape = LookAlikeKey(pod, mine);
      for (const ContainerRequest& theirs : other.request.containers) {
        if (LookAlikeKey(other.request, theirs) == my_shape) continue;  // one pool: interchangeable
        for (const Size& size : kSizes) {
          const int64_t amount = size.of(mine);
          if (amount == 0 || amount != size.of(theirs)) continue;
          if (CardsOf(other.assignment.Find(theirs.name)) == my_cards) continue;
          return "pod " + pod.Key() + " must wait: pod " + other.key + " on node " + node.state.name +
                 " asks the same " + size.resource + " (" + std::to_string(amount) +
                 ") on other cards and is not yet allocated, so the device plugin could not tell the two "
                 "apart; the scheduler will retry";
        }
      }
    }
  }
  return "";
}

uint64_t NameHash(std::string_view name) { return std::hash<std::string_view>{}(name); }
uint32_t TagOf(uint64_t hash) { return static_cast<uint32_t>(hash >> 32) | 1u; }

}  // namespace

Result<Assignment> ChooseUnambiguous(const NodeView& node, const PodRequest& pod, const std::string& uid,
                                     const WorkloadModel* workload, std::string& conflict) {
  Result<Assignment> chosen = ChooseCards(node.state, pod, workload);
  conflict.clear();
  if (!chosen.ok() || node.waiting.empty()) return chosen;
  conflict = Ambiguity(node, pod, uid, *chosen);
  if (conflict.empty()) return chosen;
  // Steer: the cards a waiting container holds make no pair with it; try them when the pod fits there.
  constexpr size_t kMaxTries = 16;
  std::set<std::set<std::string>> tried;
  for (size_t index : node.waiting) {
    for (const ContainerAssignment& theirs : node.pods[index].assignment.containers) {
      std::set<std::string> cards = CardsOf(&theirs);
      if (tried.size() >= kMaxTries || !tried.insert(cards).second) continue;
      NodeState only = node.state;
      for (CardState& c : only.cards) c.card.healthy = c.card.healthy && cards.count(c.card.uuid);
      Result<Assignment> steered = ChooseCards(only, pod, workload);
      if (steered.ok() && Ambiguity(node, pod, uid, *steered).empty()) {
        conflict.clear();
        return steered;
      }
    }
  }
  return chosen;
}

const NodeView* ClusterView::Find(std::string_view name) const {
  const Index& index = *index_;
  const uint64_t hash = NameHash(name);
  const uint32_t tag = TagOf(hash);
  const size_t mask = index.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Entry e = index[i];
    if (e.tag == 0) return nullptr;
    if (e.tag != tag) continue;
    const NodeView* view = At(e.slot);
    if (view->state.name == name) return view;
  }
}

std::vector<const NodeView*> ClusterView::Usable(const std::vector<std::string>& names, bool dra_pod) const {
  std::vector<const NodeView*> nodes(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeView* node = Find(names[i]);
    if (node && node->problem.empty() && (dra_pod || !node->dra)) nodes[i] = node;
  }
  return nodes;
}

void ClusterView::Insert(Index& index, size_t slot) const {
  const uint64_t hash = NameHash(At(slot)->state.name);
  const size_t mask = index.size() - 1;
  size_t i = hash & mask;
  while (index[i].tag != 0) i = (i + 1) & mask;
  index[i] = Entry{TagOf(hash), static_cast<uint32_t>(slot)};
}

std::vector<const NodeView*> ClusterView::Nodes() const {
  std::vector<const NodeView*> out;
  out.reserve(count_);
  for (const auto& block : blocks_) {
    for (const auto& view : *block)
      if (view) out.push_back(view.get());
  }
  std::sort(out.begin(), out.end(),
            [](const NodeView* a, const NodeView* b) { return a->state.name < b->state.name; });
  return out;
}

ClusterFree ClusterView::Free() const {
  ClusterFree out;
  out.nodes.reserve(count_);
  for (const auto& block : blocks_) {
    for (const auto& view : *block)
      if (view && view->problem.empty()) out.Add(view->state);
  }
  return out;
}

void ClusterView::Set(const std::string& name, std::shared_ptr<NodeView> view) {
  const NodeView* old = Find(name);
  const bool existed = old != nullptr;
  if (!existed && !view) return;
  size_t slot;
  if (existed) {
    slot = old->slot;
  } else if (free_slots_.empty()) {
    slot = blocks_.size() * kBlockSize;
    blocks_.push_back(std::make_shared<const Block>());
    for (size_t s = kBlockSize - 1; s > 0; --s) free_slots_.push_back(slot + s);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  if (view && view->slot != slot) view->slot = slot;  // a view served again (idle) is shared: never written
  auto block = std::make_shared<Block>(*blocks_[slot / kBlockSize]);
  (*block)[slot % kBlockSize] = std::move(view);
  blocks_[slot / kBlockSize] = std::move(block);
  if (existed && At(slot)) return;  // replaced: the index stays
  if (existed) {
    --count_;
    free_slots_.push_back(slot);
  } else {
    ++count_;
  }
  std::shared_ptr<Index> index;
  if (!existed && count_ * 2 <= index_->size()) {  // added, and room left
    index = std::make_shared<Index>(*index_);
    Insert(*index, slot);
  } else {  // removed (linear probing cannot just clear an entry), or grown: index every node afresh
    index = std::make_shared<Index>(count_ * 2 > index_->size() ? index_->size() * 2 : index_->size());
    for (size_t s = 0; s < SlotCount(); ++s)
      if (At(s)) Insert(*index, s);
  }
  index_ = std::move(index);
}

ClusterCache::ClusterCache(Config config, UnixNanosNow now_ns)
    : config_(std::move(config)), now_ns_(now_ns ? std::move(now_ns) : UnixNowNs) {}

void ClusterCache::UpsertNode(const NodeFacts& node) {
  const std::string& name = node.name;
  if (name.empty()) return;
  std::lock_guard lock(mu_);
  if (!node.annotated) {
    if (nodes_.erase(name)) {
      view_.Set(name, nullptr);
      ChangedLocked();
    }
    return;
  }
  if (!node.problem.empty()) spdlog::warn("node={} {}", name, node.problem);
  NodeEntry entry{node.inventory, node.problem, node.reason, node.allocatable, node.dra};
  auto [kept, added] = nodes_.try_emplace(name);
  if (!added && kept->second.SameFacts(entry)) return;  // a status update mgpu does not read
  kept->second = std::move(entry);
  RebuildLocked(name, now_ns_());
  ChangedLocked();
}

void ClusterCache::DeleteNode(const std::string& name) {
  std::lock_guard lock(mu_);
  nodes_.erase(name);
  view_.Set(name, nullptr);
  ChangedLocked();
}

std::optional<ClusterCache::PodEntry> ClusterCache::ToEntry(const PodFacts& pod) const {
  for (const std::string& problem : pod.problems) spdlog::warn("pod={} ignoring: {}", pod.key, problem);
  if (!pod.allocated && !pod.assignment) return std::nullopt;
  PodEntry entry;
  entry.node = pod.node;
  entry.holds_node = pod.HoldsNode();
  const Assignment& counted = pod.allocated ? *pod.allocated : *pod.assignment;
  // Admitted without D/gpu-allocated: the device plugin has matched it and waits for it no more (it writes
  // the annotation only where the kubelet's devices differ, DESIGN §5 step 4 as docs/design.md changes it);
  // in its look-alike pool it holds from the remainder until it has one (CountedOnNode).
  const bool allocated = pod.allocated.has_value() || pod.admitted;
  entry.placed = PlacedPod{pod.key, pod.uid, {}, counted, allocated, pod.assume_time_ns, pod.assignment};
  entry.placed.confirmed = pod.allocated.has_value();
  if (pod.request.ok()) {
    entry.placed.request = *pod.request;
  } else {
    spdlog::warn("pod={} holds cards but its request does not parse ({}): counting the cards it holds",
                 pod.key, pod.request.message());
    entry.placed.request = HeldRequest(pod, counted, config_);
    entry.placed.readable = false;
  }
  return entry;
}

void ClusterCache::UpsertPod(const PodFacts& pod) {
  const std::string& key = pod.key;
  std::optional<HostUse> use;
  if (pod.HoldsNode()) use = HostUse{pod.node, pod.host};
  std::optional<PodEntry> entry = ToEntry(pod);
  std::lock_guard lock(mu_);
  std::set<std::string> old_nodes = NodesOfLocked(key);
  old_nodes.merge(SetHostUseLocked(key, std::move(use)));
  if (entry)
    pods_[key] = std::move(*entry);
  else
    pods_.erase(key);
  if (auto a = assumed_.find(key); a != assumed_.end()) {
    const bool other_pod = a->second.placed.uid != pod.uid;
    const bool shown = entry && pods_[key].holds_node;
    const bool bound_elsewhere = a->second.held && !pod.node.empty();
    if (other_pod || shown || bound_elsewhere || pod.finished) assumed_.erase(a);
  }
  ReindexLocked(key, old_nodes);
  ChangedLocked();
}

void ClusterCache::DeletePod(const std::string& key, const std::string& uid) {
  std::lock_guard lock(mu_);
  std::set<std::string> old_nodes = NodesOfLocked(key);
  old_nodes.merge(SetHostUseLocked(key, std::nullopt));
  pods_.erase(key);
  if (auto a = assumed_.find(key); a != assumed_.end() && a->second.placed.uid == uid) assumed_.erase(a);
  ReindexLocked(key, old_nodes);
  ChangedLocked();
}

void ClusterCache::UpsertClaim(const dra::ClaimFacts& claim) {
  std::lock_guard lock(mu_);
  std::set<std::string> touched = {claim.node};
  if (auto old = claims_.find(claim.key); old != claims_.end()) {
    touched.insert(old->second.node);
    claims_by_node_[old->second.node].erase(claim.key);
  }
  claims_[claim.key] = claim;
  claims_by_node_[claim.node].insert(claim.key);
  const int64_t now = now_ns_();
  for (const std::string& n : touched) RebuildLocked(n, now);
  ChangedLocked();
}

void ClusterCache::DeleteClaim(const std::string& key) {
  std::lock_guard lock(mu_);
  auto old = claims_.find(key);
  if (old == claims_.end()) return;
  const std::string node = old->second.node;
  claims_.erase(old);
  if (auto on = claims_by_node_.find(node); on != claims_by_node_.end()) {
    on->second.erase(key);
    if (on->second.empty()) claims_by_node_.erase(on);
  }
  RebuildLocked(node, now_ns_());
  ChangedLocked();
}

std::shared_ptr<const ClusterView> ClusterCache::Snapshot() {
  std::lock_guard lock(mu_);
  ExpireLocked(now_ns_());
  if (!snapshot_) snapshot_ = std::make_shared<const ClusterView>(view_);
  return snapshot_;
}

Result<Assignment> ClusterCache::Reserve(const std::string& node, const PodRequest& pod,
                                         const std::string& uid, int64_t assume_ns,
                                         const WorkloadModel* workload,
                                         std::chrono::steady_clock::time_point deadline, bool* waited) {
  std::unique_lock lock(mu_);
  for (;;) {
    ExpireLocked(now_ns_());
    const NodeView* found = view_.Find(node);
    if (!found)
      return Error{"node " + node + " has no " + config_.Names().gpu_inventory +
                   " annotation; is mgpu-device-plugin running there?"};
    const NodeView& view = *found;
    if (!view.problem.empty()) return Error{view.problem};
    std::string conflict;
    Result<Assignment> assignment = ChooseUnambiguous(view, pod, uid, workload, conflict);
    if (!assignment.ok()) return assignment;
    if (conflict.empty()) {
      AssumeLocked(node, pod, uid, *assignment, assume_ns, /*held=*/false,
                   assume_ns + config_.extender.assignment_ttl_seconds * 1'000'000'000);
      return assignment;
    }
    if (std::chrono::steady_clock::now() >= deadline) return Error{conflict};
    if (waited) *waited = true;
    changed_.wait_until(lock, deadline);
  }
}

Result<Assignment> ClusterCache::Hold(const std::string& node, const PodRequest& pod, const std::string& uid,
                                      const WorkloadModel* workload) {
  std::lock_guard lock(mu_);
  const int64_t now = now_ns_();
  ExpireLocked(now);
  ForgetOwnLocked(pod.Key(), uid);
  const NodeView* found = view_.Find(node);
  if (!found) return Error{"node " + node + " is not in the extender's view"};
  if (!found->problem.empty()) return Error{found->problem};
  std::string conflict;
  Result<Assignment> assignment = ChooseUnambiguous(*found, pod, uid, workload, conflict);
  if (!assignment.ok()) return assignment;
  if (!conflict.empty()) return Error{conflict};
  const int64_t hold_ns = std::min(kHoldSeconds, config_.extender.assignment_ttl_seconds) * 1'000'000'000;
  AssumeLocked(node, pod, uid, *assignment, now, /*held=*/true, now + hold_ns);
  return assignment;
}

std::optional<Assignment> ClusterCache::Claim(const std::string& node, const std::string& key,
                                              const std::string& uid, int64_t assume_ns) {
  std::lock_guard lock(mu_);
  ExpireLocked(now_ns_());
  auto a = assumed_.find(key);
  if (a == assumed_.end() || !a->second.held || a->second.placed.uid != uid || a->second.node != node ||
      !CountsLocked(a->second, true, now_ns_()))
    return std::nullopt;
  PodEntry& entry = a->second;
  entry.held = false;
  entry.placed.assume_ns = assume_ns;
  entry.expires_ns = assume_ns + config_.extender.assignment_ttl_seconds * 1'000'000'000;
  RebuildLocked(node, now_ns_());  // look-alike pools order their members by assume time
  ChangedLocked();
  return entry.placed.assignment;
}

void ClusterCache::Unreserve(const std::string& key, const std::string& uid) {
  std::lock_guard lock(mu_);
  ForgetOwnLocked(key, uid);
}

void ClusterCache::ForgetOwnLocked(const std::string& key, const std::string& uid) {
  auto a = assumed_.find(key);
  if (a == assumed_.end() || a->second.placed.uid != uid) return;
  const std::set<std::string> old_nodes = NodesOfLocked(key);
  assumed_.erase(a);
  ReindexLocked(key, old_nodes);
  ChangedLocked();
}

void ClusterCache::AssumeLocked(const std::string& node, const PodRequest& pod, const std::string& uid,
                                const Assignment& assignment, int64_t assume_ns, bool held,
                                int64_t expires_ns) {
  const std::set<std::string> old_nodes = NodesOfLocked(pod.Key());
  PodEntry entry;
  entry.node = node;
  entry.holds_node = true;
  entry.held = held;
  entry.expires_ns = expires_ns;
  entry.placed = PlacedPod{pod.Key(), uid, pod, assignment, false, assume_ns, assignment};
  assumed_[pod.Key()] = std::move(entry);
  ReindexLocked(pod.Key(), old_nodes);
  ChangedLocked();
}

bool ClusterCache::CountsLocked(const PodEntry& entry, bool assumed, int64_t now) const {
  if (!entry.holds_node) return false;
  // The informer shows it bound and live: it keeps its cards. An assumed bind the watch has not shown is a
  // pod that may never get bound, and a hold a pod kube-scheduler may never bind: they expire.
  return !assumed || now < entry.expires_ns;
}

const ClusterCache::PodEntry* ClusterCache::EffectiveLocked(const std::string& key, int64_t now) const {
  if (auto p = pods_.find(key); p != pods_.end() && CountsLocked(p->second, false, now)) return &p->second;
  if (auto a = assumed_.find(key); a != assumed_.end() && CountsLocked(a->second, true, now))
    return &a->second;
  return nullptr;
}

std::set<std::string> ClusterCache::NodesOfLocked(const std::string& key) const {
  std::set<std::string> out;
  if (auto p = pods_.find(key); p != pods_.end() && !p->second.node.empty()) out.insert(p->second.node);
  if (auto a = assumed_.find(key); a != assumed_.end() && !a->second.node.empty()) out.insert(a->second.node);
  return out;
}

void ClusterCache::ReindexLocked(const std::string& key, const std::set<std::string>& old_nodes) {
  const std::set<std::string> new_nodes = NodesOfLocked(key);
  for (const std::string& n : old_nodes) {
    auto it = pods_by_node_.find(n);
    if (it == pods_by_node_.end()) continue;
    it->second.erase(key);
    if (it->second.empty()) pods_by_node_.erase(it);
  }
  for (const std::string& n : new_nodes) pods_by_node_[n].insert(key);
  const int64_t now = now_ns_();
  std::set<std::string> touched = old_nodes;
  touched.insert(new_nodes.begin(), new_nodes.end());
  for (const std::string& n : touched) RebuildLocked(n, now);
}

void ClusterCache::RebuildLocked(const std::string& node, int64_t now) {
  auto n = nodes_.find(node);
  if (n == nodes_.end()) {
    view_.Set(node, nullptr);
    return;
  }
  const bool idle = !requested_.count(node) && !pods_by_node_.count(node) && !claims_by_node_.count(node);
  if (idle && n->second.idle) {
    view_.Set(node, n->second.idle);
    return;
  }
  auto view = std::make_shared<NodeView>();
  view->problem = n->second.problem;
  view->reason = n->second.reason;
  view->dra = n->second.dra;
  view->generation = next_generation_++;
  if (n->second.inventory) view->state = MakeNodeState(node, *n->second.inventory, config_);
  view->state.name = node;
  HostRequest used;
  if (auto r = requested_.find(node); r != requested_.end()) used = r->second;
  std::vector<const PodEntry*> entries;
  if (auto keys = pods_by_node_.find(node); keys != pods_by_node_.end() && n->second.inventory) {
    for (const std::string& key : keys->second) {
      if (auto a = assumed_.find(key); a != assumed_.end() && a->second.node == node) {
        const int64_t expiry = a->second.expires_ns;
        if (expiry > now) next_expiry_ns_ = std::min(next_expiry_ns_, expiry);
        if (!host_.count(key)) {
          used.cpu_milli += a->second.placed.request.cpu_milli;  // bound here, not yet seen bound
          used.memory_mib += a->second.placed.request.host_memory_mib;
        }
      }
      const PodEntry* entry = EffectiveLocked(key, now);
      if (entry && entry->node == node) entries.push_back(entry);
    }
  }
  std::vector<const PlacedPod*> placed_here;
  for (const PodEntry* e : entries) placed_here.push_back(&e->placed);
  for (PlacedPod& placed : CountedOnNode(placed_here)) {
    if (Status s = Apply(view->state, placed.request, placed.assignment); !s.ok()) {
      spdlog::warn("pod={} node={} its cards are not counted: {}", placed.key, node, s.message());
      continue;
    }
    if (!placed.allocated) view->waiting.push_back(view->pods.size());
    view->pods.push_back(std::move(placed));
  }
  if (auto keys = claims_by_node_.find(node); keys != claims_by_node_.end() && n->second.inventory) {
    for (const std::string& key : keys->second) {
      const dra::ClaimFacts& claim = claims_.at(key);
      Result<dra::HeldShare> held = dra::HeldOn(claim, view->state, config_);
      Status s = held.ok() ? Apply(view->state, held->request, held->assignment) : Status(held.error());
      if (!s.ok()) {
        spdlog::warn("claim={} node={} its cards are not counted: {}", key, node, s.message());
        continue;
      }
      view->pods.push_back(PlacedPod{key, claim.uid, std::move(held->request), std::move(held->assignment),
                                     /*allocated=*/true});
    }
  }
  if (const auto& a = n->second.allocatable) {
    view->state.cpu_free_milli = std::max<int64_t>(0, a->cpu_milli - used.cpu_milli);
    view->state.host_memory_free_mib = std::max<int64_t>(0, a->memory_mib - used.memory_mib);
  }
  if (idle) n->second.idle = view;
  view_.Set(node, std::move(view));
}

void ClusterCache::ExpireLocked(int64_t now) {
  if (now < next_expiry_ns_) return;
  next_expiry_ns_ = INT64_MAX;
  for (const auto& [node, keys] : pods_by_node_) RebuildLocked(node, now);
  ChangedLocked();
}

std::set<std::string> ClusterCache::SetHostUseLocked(const std::string& key, std::optional<HostUse> use) {
  auto it = host_.find(key);
  if (it == host_.end() ? !use : use && it->second == *use) return {};
  std::set<std::string> touched;
  const auto add = [&](const HostUse& u, int sign) {
    HostRequest& sum = requested_[u.node];
    sum.cpu_milli += sign * u.request.cpu_milli;
    sum.memory_mib += sign * u.request.memory_mib;
    if (sum.cpu_milli == 0 && sum.memory_mib == 0) requested_.erase(u.node);
    touched.insert(u.node);
  };
  if (it != host_.end()) {
    add(it->second, -1);
    host_.erase(it);
  }
  if (use) {
    add(*use, 1);
    host_.emplace(key, std::move(*use));
  }
  return touched;
}

void ClusterCache::ChangedLocked() {
  snapshot_.reset();
  changed_.notify_all();
}

double PodGpuShare(const NodeView& node, const PlacedPod& pod) {
  return PodGpuShare(pod.assignment, [&node](const std::string& uuid) -> int64_t {
    const CardState* card = node.state.FindCard(uuid);
    return card ? card->card.memory_mib : 0;
  });
}

}  // namespace mgpu
