// The placement core every mgpu scheduler runs: the extender's verbs, the trace replay (bench/) and
// mgpu-place, so the benchmark measures the product's own loop. One pod's cycle: learn it into the workload
// model (ModelPublisher, which publishes the model the decisions read on the extender's cadence), decide
// every candidate node in one Place() pass (fit, cost, and why not: Decide, common/allocator.h), rank the
// fitting nodes as the extender answers kube-scheduler (Scores, beside it), then choose cards and apply them
// on the chosen node (Assign). ScheduleOne is that cycle whole, as the trace replay and mgpu-place run it;
// the extender runs its steps across its filter, prioritize and bind requests, with kube-scheduler picking
// the node between them. Plain structs in and out; no I/O, no clocks; the only lock is ModelPublisher's,
// because the extender's request threads share one model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/fragmentation.h"
#include "common/model.h"
#include "common/recent_map.h"
#include "common/result.h"

namespace mgpu {

// What every node of `nodes` has left, as WorkloadModel::SetClusterFree takes it.
ClusterFree ClusterFreeOf(const std::vector<NodeState>& nodes);

// The workload model as decisions read it. Every GPU pod a scheduler is asked about is learned, once per pod
// uid (the scheduler retries pods; a pod without a uid is learned every time). Decisions read a published
// copy, replaced after every kPublishEvery learned pods (and while the published one is empty) and given the
// cluster's free core at that moment: the workload moves slowly, and a model that stays put for a while
// lets decisions be memoised under its version. Thread-safe.
class ModelPublisher {
 public:
  static constexpr int kPublishEvery = 16;
  static constexpr size_t kRememberedUids = 8192;  // the uids learned, the latest this many

  struct Published {
    std::shared_ptr<const WorkloadModel> model;
    uint64_t version = 0;  // names the content: every publication has a new one
  };

  ModelPublisher();

  // Learns `pod` (pods asking for no GPU are not the workload) and returns the model to decide it with.
  // `cluster_free` is called, under the publisher's lock, only when a model is published.
  Published Observe(const PodRequest& pod, const std::function<ClusterFree()>& cluster_free);
  // The model published last.
  Published Current() const;
  // Forgets that pod `uid` was learned (it was deleted and will not be observed again); what it taught the
  // model stays.
  void Forget(const std::string& uid);

 private:
  mutable std::mutex mu_;
  WorkloadModel learning_;
  int unpublished_ = 0;
  Published published_;
  RecentSet learned_{kRememberedUids};  // uids
};

// Chooses cards for `pod` on `node` (ChooseCards under `model`) and applies them: a simulated bind. On error
// `node` is unchanged.
Result<Assignment> Assign(NodeState& node, const PodRequest& pod, const WorkloadModel* model);

// Where ScheduleOne put a pod.
struct Scheduled {
  static constexpr size_t kNowhere = SIZE_MAX;
  size_t node = kNowhere;               // index into the candidates; kNowhere when the pod fits none
  Assignment assignment;                // the cards applied there (none for a pod asking no GPU)
  std::vector<NodeDecision> decisions;  // parallel to the candidates
};

// One pod's whole cycle over `nodes` (the candidates, in the scheduler's order): learns `pod` into
// `publisher` (`cluster_free` as Observe takes it), decides every node (with the reason a node does not fit
// when `with_reasons`), scores the fitting ones (Scores), picks the best, and assigns the pod's cards there.
// Equal top scores: `pick(n)` chooses among the n of them, in candidate order, and returns an index below n
// (the first: kube-scheduler's own tie-break is random); it is called whenever some node fits. Fails only
// when the chosen node refuses the cards Place() chose for it, which would be a bug.
Result<Scheduled> ScheduleOne(const std::vector<NodeState*>& nodes, const PodRequest& pod,
                              ModelPublisher& publisher, const std::function<ClusterFree()>& cluster_free,
                              bool with_reasons, const std::function<size_t(size_t)>& pick,
                              Placement& scratch);

// The extender scores (0..10) of the candidates of a pod asking for no mgpu resource (a CPU-only pod),
// parallel to `decisions` (Decide's; a node mgpu cannot decide does not fit) and `has_cards` (false: a
// candidate with no mgpu card, no inventory or an empty one, where the pod fits as far as the caller knows:
// kube-scheduler's filters passed it). kube-scheduler's own scores spread such pods over every
// node and take the CPU and memory that free cards will need (issue 41, bench/RESULTS.md §1); mgpu sends them
// where they strand the least: to the nodes without cards, all scored 10, when any is a candidate
// (kube-scheduler's own scores then choose among them), else to the fitting nodes ranked by their placement
// cost (Scores: the growth of the expected fragmentation under the fragmentation policy).
std::vector<int> CpuOnlyScores(const std::vector<NodeDecision>& decisions, const std::vector<bool>& has_cards);

}  // namespace mgpu
