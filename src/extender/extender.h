// The four extender verbs over the cache: filter and prioritize read one snapshot; bind chooses cards,
// records them on the pod (D/gpu-assignment, D/gpu-assume-time, conditional on the pod's resourceVersion),
// creates the Binding and records an Event, keeping the cache's reservation only when every step succeeded;
// preempt keeps the nodes where evicting the proposed victims frees enough per-card capacity.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/fragmentation.h"
#include "common/kube/client.h"
#include "extender/cache.h"
#include "extender/decisions.h"
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
  struct ModelRef {
    std::shared_ptr<const WorkloadModel> model;
    uint64_t version = 0;
  };
  // Learns `pod`'s shapes, once per pod uid (the scheduler retries pods); returns the published model. A
  // model is published with the free core per GPU model of `view`.
  ModelRef ObserveOnce(const PodRequest& pod, const ClusterView& view);
  ModelRef Model();
  // The nodes of `names` in `view` that can take pods (null for the others).
  static std::vector<const NodeView*> UsableNodes(const ClusterView& view,
                                                  const std::vector<std::string>& names);

  ClusterCache& cache_;
  kube::Client* client_;
  WorkloadResolver* workloads_;
  Metrics& metrics_;
  std::function<bool()> is_leader_;
  static constexpr size_t kObservedUids = 8192;
  // The model in use changes every this many new pods (it moves slowly), so decisions stay memoisable.
  static constexpr int kPublishEvery = 16;
  std::mutex model_mu_;
  WorkloadModel learning_;
  int unpublished_ = 0;
  ModelRef model_{std::make_shared<const WorkloadModel>(), 0};
  std::unordered_set<std::string> observed_;  // the uids model_ learned, the latest kObservedUids
  std::deque<std::string> observed_order_;
  DecisionMemo memo_;
};

}  // namespace mgpu::extender
