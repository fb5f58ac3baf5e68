#include "extender/extender.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "common/allocator.h"
#include "common/clock.h"
#include "common/codec.h"
#include "common/json_path.h"

namespace mgpu::extender {
namespace {

// After a filter: a GPU pod that no candidate node takes though one could with no other pod on it and the
// free capacity would hold it (common/cluster_defrag.h's ShortfallIn), noted for /metrics.
bool Fragmented(const PodFacts& pod, const ClusterView& view, const FilterResult& result) {
  return pod.request.ok() && pod.request->AsksForGpu() && result.passed.empty() &&
         result.unresolvable.empty() && ShortfallIn(view, *pod.request).empty();
}

}  // namespace

Extender::Extender(ClusterCache& cache, kube::Client* client, kube::WorkloadResolver* workloads,
                   Metrics& metrics, std::function<bool()> is_leader, kube::EventQueue* events)
    : cache_(cache),
      client_(client),
      workloads_(workloads),
      metrics_(metrics),
      is_leader_(std::move(is_leader)),
      events_(events) {}

Extender::FactsRef Extender::ReadNow(const nlohmann::json& pod) {
  if (!workloads_) return std::make_shared<const PodFacts>(ReadPod(pod, cache_.config()));
  kube::WorkloadResolver::KnownWithin workload(*workloads_, kWorkloadWait);
  return std::make_shared<const PodFacts>(ReadPod(pod, cache_.config(), workload));
}

Extender::FactsRef Extender::Remembered(const std::string& uid) {
  if (uid.empty()) return nullptr;
  std::lock_guard lock(facts_mu_);
  const FactsRef* facts = facts_.Find(uid);
  return facts ? *facts : nullptr;
}

void Extender::Remember(FactsRef facts) {
  if (facts->uid.empty()) return;
  std::lock_guard lock(facts_mu_);
  const std::string uid = facts->uid;
  facts_.Put(uid, std::move(facts));
}

void Extender::Forget(const std::string& uid) {
  {
    std::lock_guard lock(facts_mu_);
    facts_.Erase(uid);
  }
  model_.Forget(uid);
  metrics_.ForgetBlocked(uid);
}

std::shared_ptr<const PodFacts> Extender::Read(const nlohmann::json& pod) {
  if (FactsRef known = Remembered(MetadataString(pod, "uid"));
      known && known->resource_version == MetadataString(pod, "resourceVersion"))
    return known;
  FactsRef facts = ReadNow(pod);
  Remember(facts);
  return facts;
}

FilterResult Extender::Filter(const ExtenderArgs& args) {
  const FactsRef& facts = args.pod;
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  if (facts->dra) {  // kube-scheduler has found where its claims fit; the model still learns its shape
    if (facts->request.ok() && facts->request->AsksForGpu())
      model_.Observe(*facts->request, [&view] { return view->Free(); });
    FilterResult all;
    for (size_t i = 0; i < args.node_names.size(); ++i) all.passed.push_back(i);
    return all;
  }
  FilterResult result{FilterPod(*view, args.node_names, facts->request, model_, memo_, cache_.config()), {}};
  if (!facts->request.ok()) spdlog::info("filter pod={}: {}", facts->key, facts->request.message());
  const bool blocked = Fragmented(*facts, *view, result);
  if (metrics_.NoteFilter(
          facts->uid, facts->key,
          {!facts->request.ok(), result.no_inventory, result.bad_inventory, result.insufficient, blocked}))
    spdlog::info(
        "filter pod={}: fits no node though the free capacity would hold it (fragmentation); "
        "kubectl mgpu defrag --dry-run plans the moves that make room",
        facts->key);
  return result;
}

FilterResult Extender::Choose(const ExtenderArgs& args) {
  const FactsRef& facts = args.pod;
  const Result<PodRequest>& pod = facts->request;
  if (!pod.ok()) return Filter(args);
  if (!pod->AsksForGpu()) return ChooseForCpuOnlyPod(args);
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const ModelPublisher::Published model = model_.Observe(*pod, [&view] { return view->Free(); });
  const std::vector<const NodeView*> nodes = view->Usable(args.node_names, facts->dra);
  const std::vector<NodeDecision> decisions =
      memo_.Decide(*view, nodes, *pod, model.model.get(), model.version, /*with_reasons=*/false);
  const std::vector<int> scores = Scores(decisions);
  std::vector<size_t> fitting;
  for (size_t i = 0; i < decisions.size(); ++i)
    if (decisions[i].fits) fitting.push_back(i);
  if (fitting.empty()) return Filter(args);  // every node with its reason, as kube-scheduler will show them
  // The best score first; equal scores in kube-scheduler's order of the candidates (it rotates their start).
  std::stable_sort(fitting.begin(), fitting.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  size_t chosen = fitting.front();
  if (facts->dra) {  // the scheduler's allocator takes its cards there, and the claims' watch shows them
    FilterResult result;
    result.passed.push_back(chosen);
    return result;
  }
  for (size_t k = 0; k < std::min(kHoldTries, fitting.size()); ++k) {
    Result<Assignment> held = cache_.Hold(args.node_names[fitting[k]], *pod, facts->uid, model.model.get());
    if (held.ok()) {
      chosen = fitting[k];
      break;
    }
    spdlog::debug("choose pod={} node={}: not held: {}", facts->key, args.node_names[fitting[k]],
                  held.message());
  }
  FilterResult result;
  result.passed.push_back(chosen);
  return result;
}

FilterResult Extender::ChooseCpuOnly(const ExtenderArgs& args) {
  const Result<PodRequest>& pod = args.pod->request;
  if (pod.ok() && !pod->AsksForGpu()) return ChooseForCpuOnlyPod(args);
  FilterResult all;
  for (size_t i = 0; i < args.node_names.size(); ++i) all.passed.push_back(i);
  return all;
}

std::vector<int> Extender::CpuOnlyScoresOf(const ExtenderArgs& args) {
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  // Any node with cards, DRA nodes included: a CPU-only pod takes their CPU and memory all the same.
  const std::vector<const NodeView*> nodes = view->Usable(args.node_names, /*dra_pod=*/true);
  std::vector<bool> has_cards(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeView* known = nodes[i] ? nodes[i] : view->Find(args.node_names[i]);
    has_cards[i] = known && (!known->problem.empty() || !known->state.cards.empty());
  }
  const ModelPublisher::Published model = model_.Current();
  return CpuOnlyScores(memo_.Decide(*view, nodes, *args.pod->request, model.model.get(), model.version,
                                    /*with_reasons=*/false),
                       has_cards);
}

FilterResult Extender::ChooseForCpuOnlyPod(const ExtenderArgs& args) {
  const std::vector<int> scores = CpuOnlyScoresOf(args);
  const int top = scores.empty() ? 0 : *std::max_element(scores.begin(), scores.end());
  FilterResult result;
  for (size_t i = 0; i < scores.size() && top > 0; ++i)
    if (scores[i] == top) result.passed.push_back(i);
  if (result.passed.empty()) {  // the cache knows no node where it fits: kube-scheduler's view decides
    for (size_t i = 0; i < args.node_names.size(); ++i) result.passed.push_back(i);
  }
  return result;
}

std::vector<HostScore> Extender::Prioritize(const ExtenderArgs& args) {
  std::vector<HostScore> scores;
  scores.reserve(args.node_names.size());
  for (const std::string& n : args.node_names) scores.push_back({n, 0});
  const FactsRef& facts = args.pod;
  const Result<PodRequest>& pod = facts->request;
  if (!pod.ok()) return scores;
  if (!pod->AsksForGpu()) {
    const std::vector<int> cpu_only = CpuOnlyScoresOf(args);
    for (size_t i = 0; i < scores.size(); ++i) scores[i].score = cpu_only[i];
    return scores;
  }
  const ModelPublisher::Published model = model_.Current();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const std::vector<const NodeView*> nodes = view->Usable(args.node_names, facts->dra);
  const std::vector<NodeDecision> decisions =
      memo_.Decide(*view, nodes, *pod, model.model.get(), model.version,
                   /*with_reasons=*/false, facts->dra ? nullptr : &facts->uid);
  const std::vector<int> node_scores = Scores(decisions);
  // A node where the bind would have to wait for a pod the device plugin could confuse with this one ranks
  // last.
  for (size_t i = 0; i < decisions.size(); ++i)
    if (decisions[i].fits && !decisions[i].waits) scores[i].score = node_scores[i];
  return scores;
}

std::string Extender::Bind(const BindArgs& args) {
  std::string why = BindPod(args);
  if (!why.empty()) metrics_.CountBindFailure();
  return why;
}

std::string Extender::BindPod(const BindArgs& args) {
  const std::string key = PodKey(args.pod_namespace, args.pod_name);
  if (is_leader_ && !is_leader_()) return "this mgpu-scheduler-extender replica is not the leader; retry";
  if (!client_) return "mgpu-scheduler-extender has no API client";
  FactsRef pod = Remembered(args.pod_uid);
  if (!pod || pod->key != key) {  // not filtered here (another replica, a restart): read it
    kube::ApiResult read = client_->GetPod(args.pod_namespace, args.pod_name);
    if (!read.ok()) return "cannot read pod " + key + ": " + read.message();
    pod = ReadNow(*read);
  }
  if (!args.pod_uid.empty() && pod->uid != args.pod_uid)
    return "pod " + key + " has uid " + pod->uid + ", not " + args.pod_uid + " (it was replaced)";
  if (!pod->node.empty()) return "pod " + key + " is already bound to node " + pod->node;
  if (!pod->request.ok()) return pod->request.message();
  if (!pod->request->AsksForGpu() || pod->dra) {  // a DRA pod's claims are allocated already
    kube::ApiResult bound = client_->BindPod(args.pod_namespace, args.pod_name, pod->uid, args.node);
    if (!bound.ok()) return "cannot bind pod " + key + " to node " + args.node + ": " + bound.message();
    Forget(pod->uid);  // bound: no verb reads it again
    if (pod->dra) spdlog::info("bound pod={} node={} cards=its DRA claims", key, args.node);
    return "";
  }
  return BindWithCards(args, std::move(pod));
}

std::string Extender::BindWithCards(const BindArgs& args, FactsRef pod) {
  const std::string& key = pod->key;
  const int64_t assume_ns = UnixNowNs();
  Result<Assignment> assignment = Error{""};
  if (std::optional<Assignment> held = cache_.Claim(args.node, key, pod->uid, assume_ns)) {
    assignment = std::move(*held);
  } else {  // not chosen here, or chosen elsewhere, or the hold ran out: choose the cards now
    const ModelPublisher::Published model = model_.Current();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(cache_.config().extender.bind_wait_ms);
    bool waited = false;
    assignment =
        cache_.Reserve(args.node, *pod->request, pod->uid, assume_ns, model.model.get(), deadline, &waited);
    if (waited) metrics_.CountBindWait();
  }
  if (!assignment.ok()) {
    spdlog::info("bind pod={} node={}: {}", key, args.node, assignment.message());
    return assignment.message();
  }
  // The cards travel with the Binding: the pod is bound with its assignment in one write, or not at all.
  const ResourceNames names = cache_.config().Names();
  const std::map<std::string, std::string> annotations = {
      {names.gpu_assignment, EncodeAssignment(*assignment)},
      {names.gpu_assume_time, EncodeAssumeTime(assume_ns)}};
  kube::ApiResult bound =
      client_->BindPod(args.pod_namespace, args.pod_name, pod->uid, args.node, annotations);
  if (!bound.ok()) {
    cache_.Unreserve(key, pod->uid);
    spdlog::info("bind pod={} node={}: binding failed: {}", key, args.node, bound.message());
    return "cannot bind pod " + key + " to node " + args.node + ": " + bound.message();
  }
  Forget(pod->uid);  // bound: no verb reads it again
  const std::string cards = DescribeAssignment(*assignment);
  const kube::Posted event =
      events_ ? events_->Post(kube::PodReference(args.pod_namespace, args.pod_name, pod->uid), "Normal",
                              "GPUAssigned", "Assigned to node " + args.node + " with cards " + cards)
              : kube::Posted::kSkipped;
  spdlog::info("bound pod={} node={} cards={} event={}", key, args.node, cards,
               events_ ? kube::Describe(event) : "none (no event queue)");
  return "";
}

kube::EventCounts Extender::EventCounts() const { return events_ ? events_->Counts() : kube::EventCounts{}; }

std::map<std::string, MetaVictims> Extender::Preempt(const PreemptArgs& args) {
  const Result<PodRequest>& pod = args.pod->request;
  if (!pod.ok()) return {};
  if (!pod->AsksForGpu() || args.pod->dra) return args.victims;  // DRA: kube-scheduler frees claims' cards
  const ModelPublisher::Published model = model_.Current();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  std::map<std::string, MetaVictims> out;
  Placement placement;
  for (const auto& [node, victims] : args.victims) {
    const NodeView* found = view->Find(node);
    if (!found || !found->problem.empty()) continue;
    NodeState state = found->state;
    const std::set<std::string> uids(victims.pod_uids.begin(), victims.pod_uids.end());
    for (const PlacedPod& placed : found->pods) {
      if (!uids.count(placed.uid)) continue;
      if (Status s = Release(state, placed.request, placed.assignment); !s.ok())
        spdlog::warn("preempt node={} pod={}: {}", node, placed.key, s.message());
    }
    if (Place(state, *pod, model.model.get(), placement)) out.emplace(node, victims);
  }
  return out;
}

}  // namespace mgpu::extender
