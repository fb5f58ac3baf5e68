// The four extender verbs over the cache: filter and prioritize read one snapshot; bind chooses cards,
// records them on the pod (D/gpu-assignment, D/gpu-assume-time, conditional on the pod's resourceVersion),
// creates the Binding and records an Event, keeping the cache's reservation only when every step succeeded;
// preempt keeps the nodes where evicting the proposed victims frees enough per-card capacity.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/fragmentation.h"
#include "common/kube/client.h"
#include "extender/cache.h"
#include "extender/metrics.h"
#include "extender/wire.h"
#include "extender/workload.h"

namespace mgpu::extender {

class Extender {
 public:
  // `client` may be null (then bind fails); `is_leader` gates bind (null: always the leader).
  Extender(ClusterCache& cache, kube::Client* client, WorkloadResolver* workloads, Metrics& metrics,
           std::function<bool()> is_leader = {});

  FilterResult Filter(const ExtenderArgs& args);
  std::vector<HostScore> Prioritize(const ExtenderArgs& args);
  // "" on success, else the sentence the scheduler shows.
  std::string Bind(const BindArgs& args);
  std::map<std::string, MetaVictims> Preempt(const PreemptArgs& args);

 private:
  Result<PodRequest> RequestOf(const nlohmann::json& pod);
  WorkloadModel ObserveAndCopyModel(const PodRequest& pod);
  WorkloadModel CopyModel();

  ClusterCache& cache_;
  kube::Client* client_;
  WorkloadResolver* workloads_;
  Metrics& metrics_;
  std::function<bool()> is_leader_;
  std::mutex model_mu_;
  WorkloadModel model_;
};

}  // namespace mgpu::extender
