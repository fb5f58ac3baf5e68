#include "common/kube/workload.h"

#include <spdlog/spdlog.h>

namespace mgpu::kube {
namespace {

nlohmann::json OwnerReferenceJson(const OwnerRef& owner) {
  return {
      {"apiVersion", owner.api_version}, {"kind", owner.kind}, {"name", owner.name}, {"controller", true}};
}

}  // namespace

std::string WorkloadResolver::KeyOf(std::string& ns, const OwnerRef& owner) {
  if (ns.empty()) ns = "default";
  return ns + "/" + owner.kind + "/" + owner.name;
}

void WorkloadResolver::Store(const std::string& key, Entry entry) {
  {
    std::lock_guard lock(mu_);
    if (cache_.size() >= kMaxEntries)
      std::erase_if(cache_, [&](const auto& e) { return entry.fetched - e.second.fetched >= ttl_; });
    auto [it, added] = cache_.try_emplace(key, entry);
    // A failed lookup leaves what was read before.
    if (!added && (entry.read || !it->second.read)) it->second = std::move(entry);
  }
  stored_.notify_all();
}

Annotations WorkloadResolver::Resolve(const nlohmann::json& pod) {
  const std::optional<OwnerRef> owner = ControllerOf(pod);
  if (!owner) return {};
  return ResolveOwner(MetadataString(pod, "namespace"), MetadataString(pod, "name"), *owner);
}

Annotations WorkloadResolver::ResolveOwner(std::string ns, const std::string& pod, const OwnerRef& owner) {
  const std::string key = KeyOf(ns, owner);
  if (!client_) return {};
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key);
        it != cache_.end() && it->second.read && now_() - it->second.fetched < ttl_)
      return it->second.annotations;
  }
  const auto failed = [&](const std::string& what, const std::string& why) {
    spdlog::warn("pod={}/{} cannot read its {}: {}", ns, pod, what, why);
    Store(key, Entry{{}, now_(), false});
    return Annotations{};
  };
  ApiResult object = client_->GetOwner(ns, OwnerReferenceJson(owner));
  if (!object.ok()) return failed(owner.kind + " " + owner.name, object.message());
  Annotations annotations = AnnotationsOf(*object);
  if (owner.kind == "ReplicaSet") {
    // A Deployment's pods are owned by its ReplicaSet; the Deployment carries the annotations.
    if (std::optional<OwnerRef> deployment = ControllerOf(*object);
        deployment && deployment->kind == "Deployment") {
      ApiResult d = client_->GetOwner(ns, OwnerReferenceJson(*deployment));
      if (!d.ok()) return failed("Deployment " + deployment->name, d.message());
      Annotations from_deployment = AnnotationsOf(*d);
      from_deployment.merge(annotations);  // the Deployment's own keys first, then the ReplicaSet's
      annotations = std::move(from_deployment);
    }
  }
  Store(key, Entry{annotations, now_(), true});
  return annotations;
}

std::optional<Annotations> WorkloadResolver::Known(const nlohmann::json& pod) {
  const std::optional<OwnerRef> owner = ControllerOf(pod);
  if (!owner) return Annotations{};
  std::string ns = MetadataString(pod, "namespace");
  const std::string key = KeyOf(ns, *owner);
  std::lock_guard lock(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second.annotations;
}

Annotations WorkloadResolver::KnownWithin::AnnotationsOf(const std::string& pod_ns, const std::string& pod,
                                                         const OwnerRef& owner) {
  std::string ns = pod_ns;
  const std::string key = KeyOf(ns, owner);
  std::unique_lock lock(resolver_.mu_);
  if (resolver_.stored_.wait_for(lock, wait_, [&] { return resolver_.cache_.count(key) > 0; }))
    return resolver_.cache_.at(key).annotations;
  spdlog::warn(
      "pod={}/{} the annotations of its {} {} are not read yet (the pod watch is behind); read without them",
      ns, pod, owner.kind, owner.name);
  return {};
}

PodFacts WorkloadResolver::ReadKnown(const nlohmann::json& pod, const Config& config,
                                     std::chrono::milliseconds wait) {
  KnownWithin source(*this, wait);
  return ReadPod(pod, config, source);
}

}  // namespace mgpu::kube
