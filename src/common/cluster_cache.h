// The cluster's cards as the extender sees them (DESIGN §5), kept live by the extender and built from one
// list by kubectl mgpu, so both show the same: nodes' D/gpu-inventory and the pods holding cards, fed by the
// node and pod informers' handlers with nodes and pods read at the edge (common/node_facts.h,
// common/pod_facts.h: no JSON past it), plus the binds this extender made that the pod watch has not shown
// yet ("assumed"), and on DRA nodes (D/gpu-dra-inventory) the driver's allocated ResourceClaims, fed by the
// extender's claim informer (dra::ReadClaim), each counted as a pod of one container holding its cards
// (dra::HeldOn). Per-card usage on a node: a bound, unfinished pod's D/gpu-allocated when it
// has one; the members of a look-alike pool without one (waiting for the kubelet, or admitted: the plugin
// writes gpu-allocated only where the devices differ from the assignment) hold what their D/gpu-assignments
// left (common/lookalike.h); an assumed bind holds its cards until the watch shows the pod, for at most
// assignmentTTLSeconds. A bound, live pod keeps its cards until it finishes, is deleted or gpu-allocated
// replaces them. Contract:
//  - One mutex; readers take Snapshot(), an immutable view shared until the next change.
//  - Reserve() chooses cards and records them as assumed under that mutex, so concurrent binds never
//    double-book a card; it steers away from ambiguous pairs and applies the guard of DESIGN §5.5 (bounded
//    wait) for those that remain.
//  - Hold() is Reserve for the choose verb, which answers kube-scheduler the one node mgpu chose: the cards
//    are held at once, so the next pod's choice sees them taken while this pod's bind is still on its way,
//    and Claim() hands them to that bind. A hold nobody claims (kube-scheduler gave up on the pod) ends when
//    the pod is chosen again, deleted or bound elsewhere, or after kHoldSeconds.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/dra.h"
#include "common/fragmentation.h"
#include "common/model.h"
#include "common/node_facts.h"
#include "common/pod_facts.h"
#include "common/request.h"
#include "common/result.h"

namespace mgpu {

// A pod holding cards on a node.
struct PlacedPod {
  std::string key;  // namespace/name
  std::string uid;
  PodRequest request;
  Assignment assignment;  // what is counted on the node's cards
  // D/gpu-allocated, or admitted by the kubelet without it: the plugin matched it (else waiting, §5.5)
  bool allocated = false;
  int64_t assume_ns = 0;
  std::optional<Assignment> assigned{};  // D/gpu-assignment, when it has one
  // Its request parsed. A pod whose request no longer does (say its workload's annotation was edited to a
  // bad value after it was bound) still holds its cards: `request` is then what `assignment` gives each
  // container, and each container is a look-alike pool of its own.
  bool readable = true;
  // It carries D/gpu-allocated. In its look-alike pool only such a member holds its own cards: an admitted
  // member without it (the plugin's write of a swap may still be on its way) holds from the pool's
  // remainder like a waiting one (common/lookalike.h).
  bool confirmed = false;
};

// What a filter reads of every node (problem, slot, generation, state.name) comes first: one or two cache
// lines per node.
struct NodeView {
  std::string problem;          // why nothing fits here (no or bad inventory); empty when usable
  std::string reason;           // the problem in kube-scheduler's words (NodeFacts::reason)
  bool dra = false;             // it serves its cards through DRA (NodeFacts::dra): usable by DRA pods only
  size_t slot = 0;              // the node's place in ClusterView, fixed while the node exists
  uint64_t generation = 0;      // distinct for every view built: decisions about it can be kept under it
  NodeState state;              // cards with their usage
  std::vector<PlacedPod> pods;  // those counted in state, by key
  std::vector<size_t> waiting;  // indexes into pods of those not yet allocated
};

// The card choice of a bind for `pod` on `node` (DESIGN §5.5): ChooseCards, steered to cards that make no
// ambiguous pair with a pod there still waiting for the kubelet when such cards fit. `conflict` gets the
// sentence when the choice would still make one (the bind must wait), else is cleared.
Result<Assignment> ChooseUnambiguous(const NodeView& node, const PodRequest& pod, const std::string& uid,
                                     const WorkloadModel* workload, std::string& conflict);

// An immutable view of every node with an inventory annotation. Nodes live in fixed slots grouped in blocks
// shared between views, so a new view after one node changed copies one block, not the cluster; lookups by
// name go through an open-addressing index of name hashes to slots (one cache line per probe, the name
// itself compared on the node), copied only when a node comes or goes.
class ClusterView {
 public:
  const NodeView* Find(std::string_view name) const;
  // The nodes of `names` that can take the pod (null for the others: unknown, with a problem, or a DRA node
  // for a pod that is not a DRA pod), parallel to `names`. A DRA pod may be scored on any node: what its
  // claims can take there is kube-scheduler's decision.
  std::vector<const NodeView*> Usable(const std::vector<std::string>& names, bool dra_pod = false) const;
  size_t size() const { return count_; }
  // Slots are below this.
  size_t SlotCount() const { return blocks_.size() * kBlockSize; }
  // Every node, in name order.
  std::vector<const NodeView*> Nodes() const;
  // What the usable nodes have left, for WorkloadModel::SetClusterFree (products point into this view).
  ClusterFree Free() const;

 private:
  friend class ClusterCache;
  static constexpr size_t kBlockSize = 64;
  using Block = std::array<std::shared_ptr<const NodeView>, kBlockSize>;
  struct Entry {
    uint32_t tag = 0;  // high half of the name's hash, never 0; 0: empty
    uint32_t slot = 0;
  };
  using Index = std::vector<Entry>;  // a power of two long, at most half full

  const NodeView* At(size_t slot) const { return (*blocks_[slot / kBlockSize])[slot % kBlockSize].get(); }
  // Adds the node in `slot` to `index`, which has room.
  void Insert(Index& index, size_t slot) const;
  // Replaces or adds (`view` non-null; its slot is set) or removes a node.
  void Set(const std::string& name, std::shared_ptr<NodeView> view);

  std::shared_ptr<const Index> index_ = std::make_shared<const Index>(16);
  size_t count_ = 0;
  std::vector<std::shared_ptr<const Block>> blocks_;
  std::vector<size_t> free_slots_;
};

// Cards' worth `pod` holds on `node` (PodGpuShare of what it holds, against the node's cards).
double PodGpuShare(const NodeView& node, const PlacedPod& pod);

class ClusterCache {
 public:
  using UnixNanosNow = std::function<int64_t()>;  // the time, unix nanoseconds
  explicit ClusterCache(Config config, UnixNanosNow now_ns = {});

  // Informer handlers.
  void UpsertNode(const NodeFacts& node);
  void DeleteNode(const std::string& name);
  void UpsertPod(const PodFacts& pod);
  void DeletePod(const std::string& key, const std::string& uid);
  void UpsertClaim(const dra::ClaimFacts& claim);
  void DeleteClaim(const std::string& key);

  std::shared_ptr<const ClusterView> Snapshot();

  // Chooses cards for `pod` on `node` (ChooseUnambiguous) and records them as assumed. When the choice would
  // still make an ambiguous pair, waits until `deadline` for the situation to change (setting `*waited`),
  // then fails with the reason.
  Result<Assignment> Reserve(const std::string& node, const PodRequest& pod, const std::string& uid,
                             int64_t assume_ns, const WorkloadModel* workload,
                             std::chrono::steady_clock::time_point deadline, bool* waited = nullptr);
  // Forgets an assumed bind or a hold (rollback).
  void Unreserve(const std::string& key, const std::string& uid);

  // How long a hold lasts unclaimed (at most assignmentTTLSeconds): kube-scheduler binds a chosen pod within
  // its extender httpTimeout of the choice unless a plugin of its own holds the pod back.
  static constexpr int64_t kHoldSeconds = 30;
  // Chooses cards for `pod` on `node` as Reserve does, without waiting: a choice that would make an
  // ambiguous pair fails with the reason. Any earlier hold or reservation of the same pod is dropped first.
  Result<Assignment> Hold(const std::string& node, const PodRequest& pod, const std::string& uid,
                          const WorkloadModel* workload);
  // The cards held for pod `uid` (key `key`) on `node`, now reserved for its bind at `assume_ns` as Reserve
  // would have; nullopt when none are held there (then Reserve).
  std::optional<Assignment> Claim(const std::string& node, const std::string& key, const std::string& uid,
                                  int64_t assume_ns);

  const Config& config() const { return config_; }

 private:
  struct PodEntry {
    std::string node;
    PlacedPod placed;
    bool holds_node = false;  // bound and not finished (the informer's entries); assumed ones: true
    bool held = false;        // assumed: a hold of the choose verb, not yet claimed by a bind
    int64_t expires_ns = 0;   // assumed: counted until then
  };
  struct NodeEntry {
    std::optional<NodeInventory> inventory;
    std::string problem, reason;
    std::optional<HostRequest> allocatable;  // status.allocatable CPU and memory, when the node states both
    bool dra = false;
    // The node's view with nothing on it, built once and served again whenever the node is idle: a wave of
    // pods leaves the views that were there before it, not copies made amid the wave's freed memory, whose
    // pages they would keep resident (and decisions remembered for it stay good).
    std::shared_ptr<NodeView> idle{};
    bool SameFacts(const NodeEntry& other) const {
      return inventory == other.inventory && problem == other.problem && reason == other.reason &&
             allocatable == other.allocatable && dra == other.dra;
    }
  };
  struct HostUse {
    std::string node;
    HostRequest request;
    bool operator==(const HostUse&) const = default;
  };

  std::optional<PodEntry> ToEntry(const PodFacts& pod) const;
  bool CountsLocked(const PodEntry& entry, bool assumed, int64_t now) const;
  // Drops the pod's own assumed entry (a hold or reservation `uid` made before), before choosing again.
  void ForgetOwnLocked(const std::string& key, const std::string& uid);
  // Records `assignment` for `pod` on `node` as assumed.
  void AssumeLocked(const std::string& node, const PodRequest& pod, const std::string& uid,
                    const Assignment& assignment, int64_t assume_ns, bool held, int64_t expires_ns);
  const PodEntry* EffectiveLocked(const std::string& key, int64_t now) const;
  void ReindexLocked(const std::string& key, const std::set<std::string>& old_nodes);
  std::set<std::string> NodesOfLocked(const std::string& key) const;
  void RebuildLocked(const std::string& node, int64_t now);
  void ExpireLocked(int64_t now);
  void ChangedLocked();
  // Records the pod's host request (`use` empty: none); returns the nodes whose sums changed (to rebuild).
  std::set<std::string> SetHostUseLocked(const std::string& key, std::optional<HostUse> use);

  const Config config_;
  const UnixNanosNow now_ns_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, NodeEntry> nodes_;
  std::map<std::string, PodEntry> pods_;     // from the informer: pods with an assignment or allocation
  std::map<std::string, PodEntry> assumed_;  // binds made here, until the watch shows them
  std::map<std::string, std::set<std::string>> pods_by_node_;
  std::map<std::string, dra::ClaimFacts> claims_;  // by key
  std::map<std::string, std::set<std::string>> claims_by_node_;
  // Every bound, unfinished pod's CPU and memory request (not only GPU pods), and their sum per node: the
  // fragmentation policy weighs what a node's CPU and memory can still feed.
  std::map<std::string, HostUse> host_;
  std::map<std::string, HostRequest> requested_;
  ClusterView view_;
  std::shared_ptr<const ClusterView> snapshot_;
  int64_t next_expiry_ns_ = INT64_MAX;
  uint64_t next_generation_ = 1;
};

}  // namespace mgpu
