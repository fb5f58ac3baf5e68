// The pods bound to this node, kept by an informer (field selector spec.nodeName=<node>), for both ends of
// the hand-off (DESIGN §5): the candidates GetPreferredAllocation matches (step 2), and D/gpu-allocated
// written from the kubelet's PodResources (step 4). Contract:
//  - Candidates() answers from the informer's copy. When no container there waits for the asked number of
//    devices, it re-lists the node's pods from the API server until one does or pendingPodWaitMs passes
//    (the kubelet may see a binding before this watch does). It first waits, within the same bound, for the
//    kubelet's first PodResources answer, so that a restarted plugin offers no allocated container again.
//  - Reconcile() writes D/gpu-allocated on a pod once the kubelet holds everything its GPU containers ask
//    for, only when that differs from what the pod carries: its D/gpu-allocated, else its D/gpu-assignment.
//    A pod that got exactly its assignment gets no write (one API write less per GPU pod, issue 27): the
//    extender counts an admitted pod's assignment as allocated (common/cluster_cache.h). A container with
//    no assignment, or holding a look-alike's cards (a swap inside the pool), gets a GPUAllocated Event
//    naming its cards; one holding other cards a GPUAllocationDiffers Warning; one holding its assignment
//    none (the extender's GPUAssigned Event says it).
//    Its own thread runs it on the poller's latest answer after each AnswerPublished(), so the PodResources
//    poller never waits for the API server.
//  - Refusals become Warning Events on the pod, or on the node when the pod is unknown, queued: nothing
//    under the kubelet's calls waits for the API server but the bounded re-list of Candidates().
//  - What the plugin handed out and the kubelet's answer may not show yet is the HandOff's (hand_off.h):
//    Candidates() counts it, and a deleted pod's hand-outs are forgotten.
//  - Thread-safe. Stop() interrupts waits and re-lists at once and stops the informer and the writer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/background.h"
#include "common/config.h"
#include "common/kube/client.h"
#include "common/kube/event_queue.h"
#include "common/kube/informer.h"
#include "common/kube/workload.h"
#include "deviceplugin/hand_off.h"
#include "deviceplugin/node_pods.h"
#include "deviceplugin/pending_pods.h"
#include "deviceplugin/pod_resources.h"

namespace mgpu::dp {

// The pods of this node the informer keeps; past it the tracker is not synced (the kubelet's own limit,
// maxPods, is 110 by default and rarely above a few hundred).
inline constexpr size_t kMaxNodePods = 10000;

class PodTracker final : public PendingPods {
 public:
  PodTracker(const Config& config, std::string node, kube::Client& client,
             const PodResourcesPoller& pod_resources, HandOff& hand_off);
  ~PodTracker() override;
  PodTracker(const PodTracker&) = delete;
  PodTracker& operator=(const PodTracker&) = delete;

  void Start();
  void Stop();
  bool Synced() const;

  std::vector<PendingContainer> Candidates(Resource resource, int64_t size) override;
  void Refused(Resource resource, const PendingContainer* container, const std::string& message) override;

  // The poller has a new answer: the writer thread reconciles it. Returns at once.
  void AnswerPublished();
  // Step 4 for one PodResources answer.
  void Reconcile(const AllocatedPods& truth);

 private:
  struct Tracked {
    NodePod pod;
    kube::Json object;  // as the informer last saw it, for Events
  };
  // What Reconcile wrote on a pod, until the informer shows the write.
  struct Written {
    Assignment allocated;
    std::string seen_version;  // the pod's resourceVersion when it was written
  };

  void WriteAllocations();  // the writer thread
  void Upsert(const kube::Json& object);
  void Remove(const kube::Json& object);
  Pending FindLocked(const std::vector<NodePod>& pods, Resource resource, int64_t size);
  // The node's pods straight from the API server; nullopt when the list failed or Stop interrupted it.
  std::optional<std::vector<NodePod>> Relist();
  void RecordEvent(const kube::Json& involved, const char* type, const char* reason,
                   const std::string& message);
  std::vector<NodePod> PodsLocked() const;

  const Config& config_;
  const std::string node_;
  kube::Client& client_;
  kube::WorkloadResolver workloads_;  // read on the informer's thread and in Relist, never under mu_
  const PodResourcesPoller& pod_resources_;
  HandOff& hand_off_;
  std::unique_ptr<kube::Informer> informer_;

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a pod changed, or Stop
  bool stopping_ = false;
  uint64_t changes_ = 0;                 // pods the watch added or changed
  uint64_t answers_ = 0;                 // PodResources answers published
  std::map<std::string, Tracked> pods_;  // by namespace/name
  kube::EventQueue events_;
  std::map<std::string, Written> written_;  // by pod uid
  std::set<kube::CancelToken*> relists_;    // in flight, cancelled by Stop
  BackgroundThread writer_{mu_, changed_};
};

}  // namespace mgpu::dp
