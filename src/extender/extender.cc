#include "extender/extender.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <set>

#include "common/allocator.h"
#include "common/codec.h"

namespace mgpu::extender {
namespace {

constexpr char kComponent[] = "mgpu-scheduler-extender";

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
      out += s.reclaimed_core ? std::to_string(s.reclaimed_core) + "% reclaimed core"
                              : std::to_string(s.core) + "% core";
      out += ", " + std::to_string(s.memory_mib) + " MiB)";
    }
  }
  return out;
}

}  // namespace

Extender::Extender(ClusterCache& cache, kube::Client* client, WorkloadResolver* workloads, Metrics& metrics,
                   std::function<bool()> is_leader)
    : cache_(cache),
      client_(client),
      workloads_(workloads),
      metrics_(metrics),
      is_leader_(std::move(is_leader)) {}

Result<PodRequest> Extender::RequestOf(const nlohmann::json& pod) {
  Annotations workload;
  if (workloads_) workload = workloads_->Resolve(pod);
  return ParsePodRequest(pod, cache_.config(), workload);
}

WorkloadModel Extender::ObserveAndCopyModel(const PodRequest& pod) {
  std::lock_guard lock(model_mu_);
  model_.Observe(pod);
  return model_;
}

WorkloadModel Extender::CopyModel() {
  std::lock_guard lock(model_mu_);
  return model_;
}

FilterResult Extender::Filter(const ExtenderArgs& args) {
  FilterResult result;
  Result<PodRequest> pod = RequestOf(args.pod);
  if (!pod.ok()) {
    for (const std::string& n : args.node_names) result.unresolvable[n] = pod.message();
    metrics_.CountFilterFailure("invalid_request");
    spdlog::info("filter pod={}/{}: {}", kube::MetadataString(args.pod, "namespace"),
                 kube::MetadataString(args.pod, "name"), pod.message());
    return result;
  }
  if (!pod->AsksForGpu()) {
    for (size_t i = 0; i < args.node_names.size(); ++i) result.passed.push_back(i);
    return result;
  }
  const WorkloadModel model = ObserveAndCopyModel(*pod);
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const std::string& inventory = cache_.config().Names().gpu_inventory;
  for (size_t i = 0; i < args.node_names.size(); ++i) {
    const std::string& name = args.node_names[i];
    auto it = view->find(name);
    if (it == view->end()) {
      result.failed[name] =
          "node " + name + " has no " + inventory + " annotation: no mgpu-device-plugin there";
      metrics_.CountFilterFailure("no_inventory");
    } else if (!it->second->problem.empty()) {
      result.failed[name] = it->second->problem;
      metrics_.CountFilterFailure("bad_inventory");
    } else if (Result<Assignment> a = ChooseCards(it->second->state, *pod, &model); a.ok()) {
      result.passed.push_back(i);
    } else {
      result.failed[name] = a.message();
      metrics_.CountFilterFailure("insufficient");
    }
  }
  return result;
}

std::vector<HostScore> Extender::Prioritize(const ExtenderArgs& args) {
  std::vector<HostScore> scores;
  for (const std::string& n : args.node_names) scores.push_back({n, 0});
  Result<PodRequest> pod = RequestOf(args.pod);
  if (!pod.ok() || !pod->AsksForGpu()) return scores;
  const WorkloadModel model = CopyModel();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  std::vector<double> costs;
  std::vector<size_t> fitting;
  for (size_t i = 0; i < args.node_names.size(); ++i) {
    auto it = view->find(args.node_names[i]);
    if (it == view->end() || !it->second->problem.empty()) continue;
    Result<Assignment> a = ChooseCards(it->second->state, *pod, &model);
    if (!a.ok()) continue;
    costs.push_back(PlacementCost(it->second->state, *pod, *a, pod->node_policy, &model));
    fitting.push_back(i);
  }
  const std::vector<int> node_scores = ExtenderScores(costs);
  for (size_t k = 0; k < fitting.size(); ++k) scores[fitting[k]].score = node_scores[k];
  return scores;
}

std::string Extender::Bind(const BindArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  if (is_leader_ && !is_leader_()) return "this mgpu-scheduler-extender replica is not the leader; retry";
  if (!client_) return "mgpu-scheduler-extender has no API client";
  kube::ApiResult pod = client_->GetPod(args.pod_namespace, args.pod_name);
  if (!pod.ok()) return "cannot read pod " + key + ": " + pod.message();
  const std::string uid = kube::MetadataString(*pod, "uid");
  if (!args.pod_uid.empty() && uid != args.pod_uid)
    return "pod " + key + " has uid " + uid + ", not " + args.pod_uid + " (it was replaced)";
  if (const std::string bound_to = pod->value("spec", nlohmann::json::object()).value("nodeName", "");
      !bound_to.empty())
    return "pod " + key + " is already bound to node " + bound_to;
  Result<PodRequest> request = RequestOf(*pod);
  if (!request.ok()) return request.message();
  if (!request->AsksForGpu()) {
    kube::ApiResult bound = client_->BindPod(args.pod_namespace, args.pod_name, uid, args.node);
    return bound.ok() ? "" : "cannot bind pod " + key + " to node " + args.node + ": " + bound.message();
  }

  const ExtenderConfig& ec = cache_.config().extender;
  const WorkloadModel model = CopyModel();
  const int64_t assume_ns = NowNs();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ec.bind_wait_ms);
  Result<Assignment> assignment = cache_.Reserve(args.node, *request, uid, assume_ns, &model, deadline);
  if (!assignment.ok()) {
    spdlog::info("bind pod={} node={}: {}", key, args.node, assignment.message());
    return assignment.message();
  }
  const ResourceNames names = cache_.config().Names();
  kube::MetadataPatch patch;
  patch.annotations[names.gpu_assignment] = EncodeAssignment(*assignment);
  patch.annotations[names.gpu_assume_time] = EncodeAssumeTime(assume_ns);
  patch.resource_version = kube::MetadataString(*pod, "resourceVersion");
  kube::ApiResult patched = client_->PatchPodMetadata(args.pod_namespace, args.pod_name, patch);
  if (!patched.ok()) {
    cache_.Unreserve(key, uid);
    spdlog::info("bind pod={} node={}: annotating failed: {}", key, args.node, patched.message());
    return "cannot record the cards of pod " + key + ": " + patched.message();
  }
  kube::ApiResult bound = client_->BindPod(args.pod_namespace, args.pod_name, uid, args.node);
  if (!bound.ok()) {
    cache_.Unreserve(key, uid);
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
  if (kube::ApiResult e =
          client_->RecordEvent(*patched, "Normal", "GPUAssigned",
                               "Assigned to node " + args.node + " with cards " + cards, kComponent);
      !e.ok())
    spdlog::warn("pod={} cannot record an event: {}", key, e.message());
  return "";
}

std::map<std::string, MetaVictims> Extender::Preempt(const PreemptArgs& args) {
  Result<PodRequest> pod = RequestOf(args.pod);
  if (!pod.ok()) return {};
  if (!pod->AsksForGpu()) return args.victims;
  const WorkloadModel model = CopyModel();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  std::map<std::string, MetaVictims> out;
  for (const auto& [node, victims] : args.victims) {
    auto it = view->find(node);
    if (it == view->end() || !it->second->problem.empty()) continue;
    NodeState state = it->second->state;
    const std::set<std::string> uids(victims.pod_uids.begin(), victims.pod_uids.end());
    for (const PlacedPod& placed : it->second->pods) {
      if (!uids.count(placed.uid)) continue;
      if (Status s = Release(state, placed.request, placed.assignment); !s.ok())
        spdlog::warn("preempt node={} pod={}: {}", node, placed.key, s.message());
    }
    if (ChooseCards(state, *pod, &model).ok()) out.emplace(node, victims);
  }
  return out;
}

}  // namespace mgpu::extender
