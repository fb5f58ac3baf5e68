// The annotations of a pod's controlling workload (DESIGN §3: ReplicaSet → Deployment, StatefulSet, Job),
// read through the API and kept per workload for a while (a minute by default), so a Deployment's replicas
// cost one lookup and an edited annotation is seen within that time by the next read of one of its pods.
// It is the WorkloadSource ReadPod asks, only for a pod that has a controller and asks for an mgpu resource:
// Resolving() (Read()) on the threads that may call the API server (an informer's, a tool's), KnownWithin
// (ReadKnown()) on request paths, which never call it and instead wait, briefly, for an informer's Read() of
// the same workload.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/kube/client.h"
#include "common/pod_facts.h"
#include "common/request.h"

namespace mgpu::kube {

class WorkloadResolver {
 public:
  using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;
  explicit WorkloadResolver(kube::Client* client, std::chrono::seconds ttl = std::chrono::seconds(60),
                            SteadyNow now = std::chrono::steady_clock::now)
      : client_(client), ttl_(ttl), now_(std::move(now)) {}
  // Empty when the pod has no controller or the lookup fails (logged; not remembered, so it is retried).
  // Reads the API server when the workload's annotations are unknown or older than the TTL.
  Annotations Resolve(const nlohmann::json& pod);
  // The annotations as last read, however old (empty after a failed first lookup, or with no controller);
  // nullopt when the workload was never looked up. No API call.
  std::optional<Annotations> Known(const nlohmann::json& pod);

  // ParsePodRequest's source of the workload's annotations on threads that may call the API server (an
  // informer's, a tool's): Resolve.
  WorkloadSource& Resolving() { return resolving_; }
  // The source on request paths, which never call the API server: the annotations as known, waiting up to
  // `wait` for another thread's Resolve when the workload was never looked up; past it the pod is read
  // without them, as after a failed lookup.
  class KnownWithin final : public WorkloadSource {
   public:
    KnownWithin(WorkloadResolver& resolver, std::chrono::milliseconds wait)
        : resolver_(resolver), wait_(wait) {}
    Annotations AnnotationsOf(const std::string& ns, const std::string& pod, const OwnerRef& owner) override;

   private:
    WorkloadResolver& resolver_;
    const std::chrono::milliseconds wait_;
  };

  // ReadPod through Resolving().
  PodFacts Read(const nlohmann::json& pod, const Config& config) { return ReadPod(pod, config, resolving_); }
  // ReadPod through KnownWithin(wait).
  PodFacts ReadKnown(const nlohmann::json& pod, const Config& config, std::chrono::milliseconds wait);

 private:
  static constexpr size_t kMaxEntries = 20000;  // past this, expired entries are dropped
  struct Entry {
    Annotations annotations;
    std::chrono::steady_clock::time_point fetched;
    bool read = true;  // false: the first lookup failed (Resolve tries again)
  };
  class ResolvingSource final : public WorkloadSource {
   public:
    explicit ResolvingSource(WorkloadResolver& resolver) : resolver_(resolver) {}
    Annotations AnnotationsOf(const std::string& ns, const std::string& pod, const OwnerRef& owner) override {
      return resolver_.ResolveOwner(ns, pod, owner);
    }

   private:
    WorkloadResolver& resolver_;
  };
  // "namespace/Kind/name" of the controller `owner` of a pod in `ns` ("" reads as "default").
  static std::string KeyOf(std::string& ns, const OwnerRef& owner);
  Annotations ResolveOwner(std::string ns, const std::string& pod, const OwnerRef& owner);
  void Store(const std::string& key, Entry entry);

  kube::Client* client_;
  const std::chrono::seconds ttl_;
  const SteadyNow now_;
  ResolvingSource resolving_{*this};
  std::mutex mu_;
  std::condition_variable stored_;  // an entry was stored
  std::map<std::string, Entry> cache_;
};

}  // namespace mgpu::kube
