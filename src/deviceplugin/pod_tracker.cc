#include "deviceplugin/pod_tracker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/codec.h"

namespace mgpu::dp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kComponent = "mgpu-device-plugin";
// How often Candidates() re-lists while the pod the kubelet admits is not in sight.
constexpr auto kRelistInterval = std::chrono::milliseconds(100);

std::string Join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

std::vector<std::string> Uuids(const std::vector<CardShare>& cards) {
  std::vector<std::string> out;
  for (const CardShare& s : cards) out.push_back(s.uuid);
  return out;
}

// The object an Event names: kind and apiVersion set (list items lack them).
kube::Json Involved(kube::Json object, const char* kind) {
  object["kind"] = kind;
  object["apiVersion"] = "v1";
  return object;
}

kube::Json PodRef(const std::string& key, const std::string& uid) {
  const size_t slash = key.find('/');
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata", {{"namespace", key.substr(0, slash)}, {"name", key.substr(slash + 1)}, {"uid", uid}}}};
}

}  // namespace

PodTracker::PodTracker(const Config& config, std::string node, kube::Client& client,
                       const PodResourcesPoller& pod_resources, HandOff& hand_off)
    : config_(config),
      node_(std::move(node)),
      client_(client),
      workloads_(&client),
      pod_resources_(pod_resources),
      hand_off_(hand_off),
      events_(client, kComponent) {}

PodTracker::~PodTracker() { Stop(); }

void PodTracker::Start() {
  kube::InformerOptions options{.resource = kube::kPods,
                                .selectors = {.field_selector = "spec.nodeName=" + node_},
                                .max_objects = kMaxNodePods};
  informer_ = std::make_unique<kube::Informer>(
      client_, std::move(options),
      kube::InformerHandlers{[this](const kube::Json& pod) { Upsert(pod); },
                             [this](const kube::Json&, const kube::Json& pod) { Upsert(pod); },
                             [this](const kube::Json& pod) { Remove(pod); }});
  informer_->Start();
  writer_.Start([this] { WriteAllocations(); });
}

void PodTracker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (kube::CancelToken* token : relists_) token->Cancel();
  }
  changed_.notify_all();
  writer_.Stop();
  if (informer_) informer_->Stop();
  events_.Stop();
}

void PodTracker::AnswerPublished() {
  {
    std::lock_guard lock(mu_);
    ++answers_;
  }
  changed_.notify_all();
}

void PodTracker::WriteAllocations() {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  while (!writer_.stopping()) {
    if (answers_ == seen) {
      changed_.wait(lock, [&] { return writer_.stopping() || answers_ != seen; });
      continue;
    }
    seen = answers_;
    lock.unlock();
    Reconcile(pod_resources_.Latest());
    lock.lock();
  }
}

bool PodTracker::Synced() const { return informer_ && informer_->HasSynced(); }

void PodTracker::Upsert(const kube::Json& object) {
  NodePod pod = NodePodOf(workloads_.Read(object, config_));
  {
    std::lock_guard lock(mu_);
    auto& tracked = pods_[pod.key];
    if (pod.problems != tracked.pod.problems) {
      for (const std::string& p : pod.problems) spdlog::warn("node={} pod={} {}", node_, pod.key, p);
    }
    tracked = Tracked{std::move(pod), Involved(object, "Pod")};
    ++changes_;
  }
  changed_.notify_all();
}

void PodTracker::Remove(const kube::Json& object) {
  const std::string key = PodKeyOf(object);
  const std::string uid = kube::MetadataString(object, "uid");
  hand_off_.Forget(uid);
  std::lock_guard lock(mu_);
  pods_.erase(key);
  written_.erase(uid);
}

std::vector<NodePod> PodTracker::PodsLocked() const {
  std::vector<NodePod> pods;
  pods.reserve(pods_.size());
  for (const auto& [key, tracked] : pods_) pods.push_back(tracked.pod);
  return pods;
}

Pending PodTracker::FindLocked(const std::vector<NodePod>& pods, Resource resource, int64_t size) {
  uint64_t answered = 0;
  const AllocatedPods truth = pod_resources_.Latest(&answered);
  return FindPending(pods, resource, size, truth, hand_off_.Unsettled(answered), config_);
}

std::vector<PendingContainer> PodTracker::Candidates(Resource resource, int64_t size) {
  const auto wait = std::chrono::milliseconds(config_.device_plugin.pending_pod_wait_ms);
  const auto deadline = Clock::now() + wait;
  if (!pod_resources_.WaitForAnswer(wait)) {
    spdlog::warn(
        "node={} the kubelet's PodResources has not answered yet: containers allocated before this "
        "plugin started may look pending",
        node_);
  }
  Pending pending;
  {
    std::lock_guard lock(mu_);
    pending = FindLocked(PodsLocked(), resource, size);
  }
  if (pending.explained || wait.count() == 0) return pending.candidates;
  // The kubelet may have seen the binding before this watch: read the node's pods from the API server.
  const std::string name = FullName(resource, config_.Names());
  int relists = 0;
  while (true) {
    if (std::optional<std::vector<NodePod>> listed = Relist()) {
      ++relists;
      std::lock_guard lock(mu_);
      pending = FindLocked(*listed, resource, size);
      if (pending.explained) break;
    }
    std::unique_lock lock(mu_);
    const uint64_t seen = changes_;
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kRelistInterval),
                        [&] { return stopping_ || changes_ != seen; });
    if (stopping_ || Clock::now() >= deadline) {
      spdlog::info(
          "node={} resource={} size={} no pod bound here waits for that many devices ({} re-lists "
          "in {} ms): the shared allocator chooses",
          node_, name, size, relists, wait.count());
      break;
    }
  }
  return pending.candidates;
}

std::optional<std::vector<NodePod>> PodTracker::Relist() {
  kube::CancelToken cancel;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return std::nullopt;
    relists_.insert(&cancel);
  }
  kube::ApiResult list =
      client_.List(kube::kPods, "", kube::ListOptions{.field_selector = "spec.nodeName=" + node_}, &cancel);
  {
    std::lock_guard lock(mu_);
    relists_.erase(&cancel);
  }
  if (!list.ok()) {
    spdlog::warn("node={} cannot re-list the pods bound here: {}", node_, list.message());
    return std::nullopt;
  }
  std::vector<NodePod> out;
  if (auto items = list->find("items"); items != list->end() && items->is_array()) {
    for (const kube::Json& item : *items) out.push_back(NodePodOf(workloads_.Read(item, config_)));
  }
  return out;
}

void PodTracker::Refused(Resource, const PendingContainer* container, const std::string& message) {
  if (!container) {  // the kubelet names no pod: the node is all there is to report on
    RecordEvent(kube::Json{{"kind", "Node"}, {"apiVersion", "v1"}, {"metadata", {{"name", node_}}}},
                "Warning", "GPUAllocationFailed", message);
    return;
  }
  kube::Json involved = PodRef(container->pod, container->pod_uid);
  {
    std::lock_guard lock(mu_);
    if (auto it = pods_.find(container->pod); it != pods_.end()) involved = it->second.object;
  }
  RecordEvent(involved, "Warning", "GPUAllocationFailed",
              "container " + container->container + ": " + message);
}

void PodTracker::Reconcile(const AllocatedPods& truth) {
  const std::string& annotation = config_.Names().gpu_allocated;
  for (const auto& [key, held] : truth) {
    Tracked tracked;
    std::vector<NodePod> node_pods;
    Assignment allocated = Normalized(held);
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      auto it = pods_.find(key);
      if (it == pods_.end() || !it->second.pod.active) continue;
      const NodePod& pod = it->second.pod;
      if (!AllocationComplete(pod, allocated)) continue;
      // What the pod says it holds, as the extender reads it: its D/gpu-allocated, else its assignment.
      const std::optional<Assignment>& carried = pod.allocated ? pod.allocated : pod.assignment;
      if (carried && Normalized(*carried) == allocated) {
        written_.erase(pod.uid);
        continue;
      }
      auto w = written_.find(pod.uid);
      if (w != written_.end() && w->second.allocated == allocated &&
          w->second.seen_version == pod.resource_version)
        continue;  // written; the watch has not shown it yet
      tracked = it->second;
      node_pods = PodsLocked();
    }
    const NodePod& pod = tracked.pod;
    kube::MetadataPatch patch;
    patch.annotations[annotation] = EncodeAssignment(allocated);
    kube::ApiResult result = client_.PatchPodMetadata(kube::MetadataString(tracked.object, "namespace"),
                                                      kube::MetadataString(tracked.object, "name"), patch);
    if (!result.ok()) {
      spdlog::warn("node={} pod={} cannot write {}: {}", node_, key, annotation, result.message());
      continue;
    }
    {
      std::lock_guard lock(mu_);
      written_[pod.uid] = Written{allocated, pod.resource_version};
    }
    for (const ContainerAssignment& c : allocated.containers) {
      spdlog::info("node={} pod={} container={} card={} allocated", node_, key, c.container,
                   Join(Uuids(c.cards), ","));
      const ContainerAssignment* assigned = pod.assignment ? pod.assignment->Find(c.container) : nullptr;
      // The cards of its assignment: the extender's GPUAssigned event and the D/gpu-allocated just written
      // say so, and an event for every GPU pod would be one more API write each (issue 27). Another
      // look-alike's cards are a normal swap inside the pool, said as a Normal event; any other difference
      // is a Warning.
      if (assigned && Normalized(Assignment{{*assigned}}).containers.front() == c) continue;
      if (!assigned || WithinPool(node_pods, pod, c)) {
        RecordEvent(tracked.object, "Normal", "GPUAllocated",
                    "allocated cards " + DescribeCards(c.cards) + " to container " + c.container +
                        (assigned ? ", in place of its assignment " + DescribeCards(assigned->cards) +
                                        ": look-alike pods may swap cards"
                                  : ""));
      } else {
        RecordEvent(tracked.object, "Warning", "GPUAllocationDiffers",
                    "container " + c.container + " holds cards " + DescribeCards(c.cards) +
                        " instead of its assignment " + DescribeCards(assigned->cards));
      }
    }
  }
}

void PodTracker::RecordEvent(const kube::Json& involved, const char* type, const char* reason,
                             const std::string& message) {
  if (kube::Posted posted = events_.Post(involved, type, reason, message); posted == kube::Posted::kSkipped)
    spdlog::info("{}/{} event {} {}: {}", kube::MetadataString(involved, "namespace"),
                 kube::MetadataString(involved, "name"), reason, kube::Describe(posted), message);
}

}  // namespace mgpu::dp
