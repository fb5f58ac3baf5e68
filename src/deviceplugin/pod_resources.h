// What the kubelet really handed out (DESIGN §5 step 4), read from its PodResources API: per pod, the cards
// and amounts each container holds, in the D/gpu-allocated shape. The poller keeps the latest answer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/model.h"
#include "kubelet/podresources/v1/api.pb.h"

namespace mgpu::dp {

// Pod key ("namespace/name") → the mgpu devices its containers hold. Containers and pods without mgpu
// devices are left out; device IDs that are not mgpu's are skipped.
using AllocatedPods = std::map<std::string, Assignment>;

AllocatedPods ReadAllocatedPods(const v1::ListPodResourcesResponse& response, const Config& config);

// Sums the allocations per card.
std::map<std::string, CardShare> UsageByCard(const AllocatedPods& pods);

class PodResourcesPoller {
 public:
  explicit PodResourcesPoller(const Config& config) : config_(config) {}
  ~PodResourcesPoller() { Stop(); }
  void Start();
  void Stop();
  AllocatedPods Latest() const;
  bool HasAnswer() const;

 private:
  void Run();

  const Config& config_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool answered_ = false;
  AllocatedPods latest_;
  std::thread thread_;
};

}  // namespace mgpu::dp
