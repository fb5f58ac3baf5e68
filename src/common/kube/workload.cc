#include "common/kube/workload.h"

#include <spdlog/spdlog.h>

namespace mgpu::kube {
namespace {

nlohmann::json OwnerReferenceJson(const OwnerRef& owner) {
  return {
      {"apiVersion", owner.api_version}, {"kind", owner.kind}, {"name", owner.name}, {"controller", true}};
}

}  // namespace

Annotations WorkloadResolver::Resolve(const nlohmann::json& pod) {
  const std::optional<OwnerRef> owner = ControllerOf(pod);
  if (!owner || !client_) return {};
  std::string ns = MetadataString(pod, "namespace");
  if (ns.empty()) ns = "default";
  const std::string key = ns + "/" + owner->kind + "/" + owner->name;
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end() && now_() - it->second.fetched < ttl_)
      return it->second.annotations;
  }
  ApiResult object = client_->GetOwner(ns, OwnerReferenceJson(*owner));
  if (!object.ok()) {
    spdlog::warn("pod={}/{} cannot read its {} {}: {}", ns, MetadataString(pod, "name"), owner->kind,
                 owner->name, object.message());
    return {};
  }
  Annotations annotations = AnnotationsOf(*object);
  if (owner->kind == "ReplicaSet") {
    // A Deployment's pods are owned by its ReplicaSet; the Deployment carries the annotations.
    if (std::optional<OwnerRef> deployment = ControllerOf(*object);
        deployment && deployment->kind == "Deployment") {
      ApiResult d = client_->GetOwner(ns, OwnerReferenceJson(*deployment));
      if (!d.ok()) {
        spdlog::warn("pod={}/{} cannot read Deployment {}: {}", ns, MetadataString(pod, "name"),
                     deployment->name, d.message());
        return {};
      }
      Annotations from_deployment = AnnotationsOf(*d);
      from_deployment.merge(annotations);  // the Deployment's own keys first, then the ReplicaSet's
      annotations = std::move(from_deployment);
    }
  }
  const auto now = now_();
  std::lock_guard lock(mu_);
  if (cache_.size() >= kMaxEntries)
    std::erase_if(cache_, [&](const auto& entry) { return now - entry.second.fetched >= ttl_; });
  cache_[key] = Entry{annotations, now};
  return annotations;
}

}  // namespace mgpu::kube
