// The annotations of a pod's controlling workload (DESIGN §3: ReplicaSet → Deployment, StatefulSet, Job),
// read through the API and kept per workload, so the scheduler's retries of one pod cost one lookup.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/kube/client.h"
#include "common/request.h"

namespace mgpu::extender {

class WorkloadResolver {
 public:
  explicit WorkloadResolver(kube::Client* client) : client_(client) {}
  // Empty when the pod has no controller or the lookup fails (logged; not remembered, so it is retried).
  Annotations Resolve(const nlohmann::json& pod);

 private:
  kube::Client* client_;
  std::mutex mu_;
  std::map<std::string, Annotations> cache_;  // "namespace/Kind/name" of the pod's controller
};

}  // namespace mgpu::extender
