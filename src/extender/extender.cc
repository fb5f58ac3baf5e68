#include "extender/extender.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <set>

#include "common/allocator.h"
#include "common/codec.h"
#include "common/json_path.h"

namespace mgpu::extender {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Describe(const Assignment& assignment) {
  std::string out;
  for (const ContainerAssignment& c : assignment.containers) {
    for (const CardShare& s : c.cards) {
      if (!out.empty()) out += "; ";
      out += c.container + ": " + s.uuid + " (";
      out += s.reclaimed_core ? std::to_string(s.reclaimed_core) + " percent reclaimed core"
                              : std::to_string(s.core) + " percent core";
      out += ", " + std::to_string(s.memory_mib) + " MiB)";
    }
  }
  return out;
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
  return std::make_shared<const PodFacts>(workloads_
                                              ? workloads_->ReadKnown(pod, cache_.config(), kWorkloadWait)
                                              : ReadPod(pod, cache_.config()));
}

Extender::FactsRef Extender::Remembered(const std::string& uid) {
  if (uid.empty()) return nullptr;
  std::lock_guard lock(facts_mu_);
  auto it = facts_.find(uid);
  return it == facts_.end() ? nullptr : it->second;
}

void Extender::Remember(FactsRef facts) {
  if (facts->uid.empty()) return;
  std::lock_guard lock(facts_mu_);
  auto [it, added] = facts_.insert_or_assign(facts->uid, facts);
  if (!added) return;
  facts_order_.push_back(it->first);
  if (facts_order_.size() > kRememberedPods) {
    facts_.erase(facts_order_.front());
    facts_order_.pop_front();
  }
}

std::shared_ptr<const PodFacts> Extender::Read(const nlohmann::json& pod) {
  const nlohmann::json* meta = FindPath(pod, {"metadata"});
  if (meta) {
    if (FactsRef known = Remembered(StringAt(*meta, {"uid"}));
        known && known->resource_version == StringAt(*meta, {"resourceVersion"}))
      return known;
  }
  FactsRef facts = ReadNow(pod);
  Remember(facts);
  return facts;
}

FilterResult Extender::Filter(const ExtenderArgs& args) {
  const FactsRef& facts = args.pod;
  FilterResult result{
      FilterPod(*cache_.Snapshot(), args.node_names, facts->request, model_, memo_, cache_.config()), {}};
  if (!facts->request.ok()) {
    metrics_.CountFilterFailure("invalid_request");
    spdlog::info("filter pod={}: {}", facts->key, facts->request.message());
  }
  metrics_.CountFilterFailure("no_inventory", result.no_inventory);
  metrics_.CountFilterFailure("bad_inventory", result.bad_inventory);
  metrics_.CountFilterFailure("insufficient", result.insufficient);
  return result;
}

std::vector<HostScore> Extender::Prioritize(const ExtenderArgs& args) {
  std::vector<HostScore> scores;
  scores.reserve(args.node_names.size());
  for (const std::string& n : args.node_names) scores.push_back({n, 0});
  const FactsRef& facts = args.pod;
  const Result<PodRequest>& pod = facts->request;
  if (!pod.ok() || !pod->AsksForGpu()) return scores;
  const ModelPublisher::Published model = model_.Current();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const std::vector<const NodeView*> nodes = UsableNodes(*view, args.node_names);
  const std::vector<NodeDecision> decisions =
      memo_.Decide(*view, nodes, *pod, model.model.get(), model.version, /*with_reasons=*/false);
  const std::vector<int> node_scores = Scores(decisions);
  std::string conflict;
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (!decisions[i].fits) continue;
    scores[i].score = node_scores[i];
    // A bind here would have to wait for a pod the device plugin could confuse with this one: rank it last.
    if (!nodes[i]->waiting.empty() &&
        ChooseUnambiguous(*nodes[i], *pod, facts->uid, model.model.get(), conflict).ok() && !conflict.empty())
      scores[i].score = 0;
  }
  return scores;
}

std::string Extender::Bind(const BindArgs& args) {
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
  if (!pod->request->AsksForGpu()) {
    kube::ApiResult bound = client_->BindPod(args.pod_namespace, args.pod_name, pod->uid, args.node);
    return bound.ok() ? "" : "cannot bind pod " + key + " to node " + args.node + ": " + bound.message();
  }
  return BindWithCards(args, std::move(pod));
}

std::string Extender::BindWithCards(const BindArgs& args, FactsRef pod) {
  const std::string key = pod->key;  // a copy: a conflict replaces `pod`
  const ExtenderConfig& ec = cache_.config().extender;
  const ModelPublisher::Published model = model_.Current();
  const int64_t assume_ns = NowNs();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ec.bind_wait_ms);
  bool waited = false;
  Result<Assignment> assignment =
      cache_.Reserve(args.node, *pod->request, pod->uid, assume_ns, model.model.get(), deadline, &waited);
  if (waited) metrics_.CountBindWait();
  if (!assignment.ok()) {
    spdlog::info("bind pod={} node={}: {}", key, args.node, assignment.message());
    return assignment.message();
  }
  const ResourceNames names = cache_.config().Names();
  kube::MetadataPatch patch;
  patch.annotations[names.gpu_assignment] = EncodeAssignment(*assignment);
  patch.annotations[names.gpu_assume_time] = EncodeAssumeTime(assume_ns);
  // Conditional on the version the request was read from; a conflict (often the scheduler's own status
  // write) reads the pod again and retries while it is the same, unbound pod asking the same.
  for (int attempt = 0;; ++attempt) {
    patch.resource_version = pod->resource_version;
    kube::ApiResult patched = client_->PatchPodMetadata(args.pod_namespace, args.pod_name, patch);
    if (patched.ok()) break;
    std::string why = "cannot record the cards of pod " + key + ": " + patched.message();
    if (patched.IsConflict() && attempt < kConflictRetries) {
      kube::ApiResult read = client_->GetPod(args.pod_namespace, args.pod_name);
      if (read.ok()) {
        FactsRef fresh = ReadNow(*read);
        if (fresh->uid == pod->uid && fresh->node.empty() && fresh->request.ok() &&
            fresh->request->containers == pod->request->containers) {
          metrics_.CountBindConflictRetry();
          Remember(fresh);
          pod = std::move(fresh);
          continue;
        }
        why = "pod " + key + " changed while it was being bound; the scheduler will retry";
      }
    }
    cache_.Unreserve(key, pod->uid);
    spdlog::info("bind pod={} node={}: {}", key, args.node, why);
    return why;
  }
  kube::ApiResult bound = client_->BindPod(args.pod_namespace, args.pod_name, pod->uid, args.node);
  if (!bound.ok()) {
    cache_.Unreserve(key, pod->uid);
    kube::MetadataPatch undo;
    undo.annotations[names.gpu_assignment] = std::nullopt;
    undo.annotations[names.gpu_assume_time] = std::nullopt;
    if (kube::ApiResult r = client_->PatchPodMetadata(args.pod_namespace, args.pod_name, undo); !r.ok())
      spdlog::warn("pod={} cannot remove its unused {}: {}", key, names.gpu_assignment, r.message());
    spdlog::info("bind pod={} node={}: binding failed: {}", key, args.node, bound.message());
    return "cannot bind pod " + key + " to node " + args.node + ": " + bound.message();
  }
  const std::string cards = Describe(*assignment);
  spdlog::info("bound pod={} node={} cards={}", key, args.node, cards);
  if (events_)
    events_->Post(kube::PodReference(args.pod_namespace, args.pod_name, pod->uid), "Normal", "GPUAssigned",
                  "Assigned to node " + args.node + " with cards " + cards);
  return "";
}

std::map<std::string, MetaVictims> Extender::Preempt(const PreemptArgs& args) {
  const Result<PodRequest>& pod = args.pod->request;
  if (!pod.ok()) return {};
  if (!pod->AsksForGpu()) return args.victims;
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
