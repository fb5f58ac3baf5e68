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

Extender::ModelRef Extender::ObserveOnce(const PodRequest& pod, const ClusterView& view) {
  std::lock_guard lock(model_mu_);
  if (!pod.uid.empty()) {
    if (!observed_.insert(pod.uid).second) return model_;
    observed_order_.push_back(pod.uid);
    if (observed_order_.size() > kObservedUids) {
      observed_.erase(observed_order_.front());
      observed_order_.pop_front();
    }
  }
  learning_.Observe(pod);
  if (++unpublished_ >= kPublishEvery || model_.model->Empty()) {
    learning_.SetClusterFree(view.FreeCoreByProduct());
    model_ = ModelRef{std::make_shared<const WorkloadModel>(learning_), model_.version + 1};
    unpublished_ = 0;
  }
  return model_;
}

Extender::ModelRef Extender::Model() {
  std::lock_guard lock(model_mu_);
  return model_;
}

std::vector<const NodeView*> Extender::UsableNodes(const ClusterView& view,
                                                   const std::vector<std::string>& names) {
  std::vector<const NodeView*> nodes(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeView* node = view.Find(names[i]);
    if (node && node->problem.empty()) nodes[i] = node;
  }
  return nodes;
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
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const ModelRef model = ObserveOnce(*pod, *view);
  const std::vector<const NodeView*> nodes = UsableNodes(*view, args.node_names);
  const std::vector<Decision> decisions = memo_.Decide(*view, nodes, *pod, model.model.get(), model.version);
  const std::string& inventory = cache_.config().Names().gpu_inventory;
  uint64_t no_inventory = 0, bad_inventory = 0, insufficient = 0;
  result.passed.reserve(args.node_names.size());
  for (size_t i = 0; i < args.node_names.size(); ++i) {
    const std::string& name = args.node_names[i];
    if (decisions[i].fits) {
      result.passed.push_back(i);
    } else if (nodes[i]) {
      result.failed[name] = ChooseCards(nodes[i]->state, *pod, model.model.get()).message();
      ++insufficient;
    } else if (const NodeView* bad = view->Find(name)) {
      result.failed[name] = bad->problem;
      ++bad_inventory;
    } else {
      result.failed[name] =
          "node " + name + " has no " + inventory + " annotation: no mgpu-device-plugin there";
      ++no_inventory;
    }
  }
  metrics_.CountFilterFailure("no_inventory", no_inventory);
  metrics_.CountFilterFailure("bad_inventory", bad_inventory);
  metrics_.CountFilterFailure("insufficient", insufficient);
  return result;
}

std::vector<HostScore> Extender::Prioritize(const ExtenderArgs& args) {
  std::vector<HostScore> scores;
  scores.reserve(args.node_names.size());
  for (const std::string& n : args.node_names) scores.push_back({n, 0});
  Result<PodRequest> pod = RequestOf(args.pod);
  if (!pod.ok() || !pod->AsksForGpu()) return scores;
  const ModelRef model = Model();
  const std::shared_ptr<const ClusterView> view = cache_.Snapshot();
  const std::vector<Decision> decisions =
      memo_.Decide(*view, UsableNodes(*view, args.node_names), *pod, model.model.get(), model.version);
  std::vector<double> costs;
  std::vector<size_t> fitting;
  costs.reserve(args.node_names.size());
  fitting.reserve(args.node_names.size());
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (!decisions[i].fits) continue;
    costs.push_back(decisions[i].cost);
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
  const ModelRef model = Model();
  const int64_t assume_ns = NowNs();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ec.bind_wait_ms);
  Result<Assignment> assignment =
      cache_.Reserve(args.node, *request, uid, assume_ns, model.model.get(), deadline);
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
  const ModelRef model = Model();
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
