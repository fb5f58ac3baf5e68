// The annotations of a pod's controlling workload (DESIGN §3: ReplicaSet → Deployment, StatefulSet, Job),
// read through the API and kept per workload for a while (a minute by default), so the scheduler's retries
// and a Deployment's replicas cost one lookup, and an edited annotation is seen within that time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/kube/client.h"
#include "common/request.h"

namespace mgpu::kube {

class WorkloadResolver {
 public:
  using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;
  explicit WorkloadResolver(kube::Client* client, std::chrono::seconds ttl = std::chrono::seconds(60),
                            SteadyNow now = std::chrono::steady_clock::now)
      : client_(client), ttl_(ttl), now_(std::move(now)) {}
  // Empty when the pod has no controller or the lookup fails (logged; not remembered, so it is retried).
  Annotations Resolve(const nlohmann::json& pod);

 private:
  static constexpr size_t kMaxEntries = 20000;  // past this, expired entries are dropped
  struct Entry {
    Annotations annotations;
    std::chrono::steady_clock::time_point fetched;
  };
  kube::Client* client_;
  const std::chrono::seconds ttl_;
  const SteadyNow now_;
  std::mutex mu_;
  std::map<std::string, Entry> cache_;  // "namespace/Kind/name" of the pod's controller
};

}  // namespace mgpu::kube
