// What the kubelet really handed out (DESIGN §5 step 4), read from its PodResources API into AllocatedPods
// (allocated_pods.h). The poller only asks and publishes its latest answer; what follows from an answer (the
// writes of D/gpu-allocated) runs on its reader's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "common/background.h"
#include "common/config.h"
#include "common/model.h"
#include "deviceplugin/allocated_pods.h"

namespace v1 {
class ListPodResourcesResponse;  // kubelet/podresources/v1/api.proto
}

namespace mgpu::dp {

// Device IDs that are not mgpu's are skipped.
AllocatedPods ReadAllocatedPods(const v1::ListPodResourcesResponse& response, const Config& config);

// Lists every devicePlugin.podResourcesPollMs (well inside the kubelet's rate limit) on one thread.
class PodResourcesPoller {
 public:
  // `on_answer` (may be empty) runs on the poller's thread after every answer: it must return at once (the
  // daemon's tells the pod tracker, whose own thread acts on the answer).
  explicit PodResourcesPoller(const Config& config, std::function<void(const AllocatedPods&)> on_answer = {})
      : config_(config), on_answer_(std::move(on_answer)) {}
  ~PodResourcesPoller() { Stop(); }
  void Start();
  void Stop();
  // The latest answer; `request` (optional) gets the number of the List request that produced it (requests
  // are numbered from 1 as they start; 0: no answer yet).
  AllocatedPods Latest(uint64_t* request = nullptr) const;
  // List requests started so far: an answer to a request numbered above this reflects everything the kubelet
  // had handed out before now.
  uint64_t RequestsStarted() const;
  bool HasAnswer() const;
  // Waits until the kubelet has answered once (or `timeout` passes, or Stop); returns HasAnswer().
  bool WaitForAnswer(std::chrono::milliseconds timeout) const;

 private:
  void Run();

  const Config& config_;
  const std::function<void(const AllocatedPods&)> on_answer_;
  mutable std::mutex mu_;
  mutable std::condition_variable wake_;  // on Stop and on every answer
  bool answered_ = false;
  AllocatedPods latest_;
  uint64_t requests_started_ = 0;
  uint64_t latest_request_ = 0;
  BackgroundThread thread_{mu_, wake_};
};

}  // namespace mgpu::dp
