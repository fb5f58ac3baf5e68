// The four extender verbs over the cache: filter and prioritize read one snapshot; bind chooses cards,
// records them on the pod (D/gpu-assignment, D/gpu-assume-time, conditional on the pod's resourceVersion)
// and creates the Binding - two API calls - keeping the cache's reservation only when both succeeded, and
// queues an Event; preempt keeps the nodes where evicting the proposed victims frees enough per-card
// capacity. The verbs take the pod read at the HTTP edge (Read: common/pod_facts.h, once per uid and
// resourceVersion, with the annotations of its workload as the pod informer resolved them, so no request
// calls the API server for them); prioritize and bind reuse what filter read, and bind takes the
// resourceVersion from it instead of reading the pod; on a 409 it reads the pod again and retries, a bounded
// number of times.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cluster_cache.h"
#include "common/decision_memo.h"
#include "common/filter.h"
#include "common/fragmentation.h"
#include "common/kube/client.h"
#include "common/kube/event_queue.h"
#include "common/kube/workload.h"
#include "common/pod_facts.h"
#include "common/scheduler.h"
#include "extender/metrics.h"
#include "extender/wire.h"

namespace mgpu::extender {

class Extender {
 public:
  // `client` may be null (then bind fails); `workloads` may be null (pods are read without their workloads'
  // annotations); `events` may be null (no events); `is_leader` gates bind (null: always the leader).
  Extender(ClusterCache& cache, kube::Client* client, kube::WorkloadResolver* workloads, Metrics& metrics,
           std::function<bool()> is_leader = {}, kube::EventQueue* events = nullptr);

  // How long reading a pod waits for the pod informer to have read its workload's annotations.
  static constexpr std::chrono::milliseconds kWorkloadWait{2000};

  // The pod object of a request as the verbs take it: remembered per uid for the latest resourceVersion
  // read, else read now (WorkloadResolver::ReadKnown). The wire's PodReader.
  std::shared_ptr<const PodFacts> Read(const nlohmann::json& pod);
  PodReader Reader() {
    return [this](const nlohmann::json& pod) { return Read(pod); };
  }

  FilterResult Filter(const ExtenderArgs& args);
  std::vector<HostScore> Prioritize(const ExtenderArgs& args);
  // "" on success, else the sentence the scheduler shows.
  std::string Bind(const BindArgs& args);
  std::map<std::string, MetaVictims> Preempt(const PreemptArgs& args);

 private:
  using FactsRef = std::shared_ptr<const PodFacts>;
  // ReadPod of a pod object (with its workload's annotations as known).
  FactsRef ReadNow(const nlohmann::json& pod);
  FactsRef Remembered(const std::string& uid);
  void Remember(FactsRef facts);
  std::string BindWithCards(const BindArgs& args, FactsRef pod);

  ClusterCache& cache_;
  kube::Client* client_;
  kube::WorkloadResolver* workloads_;
  Metrics& metrics_;
  std::function<bool()> is_leader_;
  ModelPublisher model_;  // learned in filter, read by every verb
  DecisionMemo memo_;
  kube::EventQueue* events_;
  static constexpr size_t kRememberedPods = 8192;
  static constexpr int kConflictRetries = 3;
  std::mutex facts_mu_;
  std::unordered_map<std::string, FactsRef> facts_;  // by uid
  std::deque<std::string> facts_order_;
};

}  // namespace mgpu::extender
