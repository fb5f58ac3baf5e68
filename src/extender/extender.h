// The extender verbs over the cache: filter answers every candidate node that fits (and why the others do
// not), prioritize scores them; choose is filter for one call per pod: it decides and scores the candidates
// as filter and prioritize would, holds the cards of the best node (ClusterCache::Hold) and answers that node
// alone, so kube-scheduler needs no prioritize and binds exactly where mgpu's policy says. Bind takes the
// chosen node's held cards (or chooses them: Reserve) and creates the Binding with D/gpu-assignment and
// D/gpu-assume-time as its annotations - one API call, which the API server applies with spec.nodeName in
// one update, conditional on the pod's uid - keeping the cache's reservation only when it succeeded, and
// posts a GPUAssigned Event (sampled: kube::EventQueue; the log line says when it was not). Preempt keeps
// the nodes where evicting the proposed victims frees enough per-card capacity. The verbs take the pod read
// at the HTTP edge (Read: common/pod_facts.h, once per uid and resourceVersion, with the annotations of its
// workload as the pod informer resolved them, so no request calls the API server for them); prioritize and
// bind reuse what filter or choose read.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cluster_cache.h"
#include "common/cluster_defrag.h"
#include "common/decision_memo.h"
#include "common/filter.h"
#include "common/fragmentation.h"
#include "common/kube/client.h"
#include "common/kube/event_queue.h"
#include "common/kube/workload.h"
#include "common/pod_facts.h"
#include "common/recent_map.h"
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
  // read, else read now (ReadPod, its workload's annotations as known: WorkloadResolver::KnownWithin). The
  // wire's PodReader.
  std::shared_ptr<const PodFacts> Read(const nlohmann::json& pod);
  PodReader Reader() { return std::bind_front(&Extender::Read, this); }
  // Forgets pod `uid`: what Read remembered of it, that the workload model learned it, that it was blocked by
  // fragmentation. Called when the pod informer sees it deleted and when it is bound here (no verb reads it
  // again): nothing the extender keeps per pod outlives the pod, and a bound pod costs only its place in the
  // cache and the informer.
  void Forget(const std::string& uid);
  // Forgets the decisions remembered for node views (DecisionMemo::Clear): once a wave of pods is over, its
  // views are gone, and what was decided for them would only keep memory of the wave resident.
  void ForgetDecisions() { memo_.Clear(); }

  FilterResult Filter(const ExtenderArgs& args);
  // One node passes: the one mgpu chooses, its cards held for the bind. When no node fits: as Filter. A pod
  // asking for no mgpu resource: the nodes CpuOnlyScores scores 10 (those without mgpu cards, else the one
  // where it strands the least); every node when the cache knows none where it fits.
  FilterResult Choose(const ExtenderArgs& args);
  // choose for a pod asking for no mgpu resource; every other pod passes on every node. The verb of the
  // scheduler configuration's second extender entry, which sees every pod and is ignorable, so that CPU-only
  // pods are placed by mgpu's policy and still scheduled while the extender is down
  // (deploy/extender/scheduler-config.yaml).
  FilterResult ChooseCpuOnly(const ExtenderArgs& args);
  // Scores 0..10: mgpu's policy's (Scores, or CpuOnlyScores for a pod asking for no mgpu resource).
  std::vector<HostScore> Prioritize(const ExtenderArgs& args);
  // "" on success, else the sentence the scheduler shows.
  std::string Bind(const BindArgs& args);
  // The GPUAssigned events so far, by outcome (none without an event queue).
  kube::EventCounts EventCounts() const;
  std::map<std::string, MetaVictims> Preempt(const PreemptArgs& args);

 private:
  using FactsRef = std::shared_ptr<const PodFacts>;
  // ReadPod of a pod object (with its workload's annotations as known).
  FactsRef ReadNow(const nlohmann::json& pod);
  FactsRef Remembered(const std::string& uid);
  void Remember(FactsRef facts);
  std::string BindPod(const BindArgs& args);
  // CpuOnlyScores of the candidates of a pod asking for no mgpu resource.
  std::vector<int> CpuOnlyScoresOf(const ExtenderArgs& args);
  FilterResult ChooseForCpuOnlyPod(const ExtenderArgs& args);
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
  // Choose tries to hold the cards of this many of the best nodes before it answers the best one unheld
  // (whose bind then waits out an ambiguous pair, as after filter and prioritize).
  static constexpr size_t kHoldTries = 8;
  std::mutex facts_mu_;
  // By uid: pods read for the verbs, until bound (or deleted, or pushed out by newer ones).
  RecentMap<FactsRef> facts_{kRememberedPods};
};

}  // namespace mgpu::extender
