// The node's cards and their health, shared by either mode's kubelet servers, the health watcher, the
// publishers and metrics. One mutex; readers take snapshots. Every health change bumps a generation that the
// kubelet streams (ListAndWatch, NodeWatchResources) and the publishers wait on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/model.h"

namespace mgpu::node {

class DeviceState {
 public:
  explicit DeviceState(std::vector<Card> cards);

  std::vector<Card> Cards() const;
  uint64_t Generation() const;

  // Marks one card (or every card, for an empty uuid) healthy or not; true if anything changed.
  bool SetHealthy(const std::string& uuid, bool healthy);

  // Waits until the generation differs from `seen`, `stop()` holds or `timeout` passes; returns the
  // generation and cards then. `stop` is evaluated under the state's lock: call Wake() after setting it.
  std::pair<uint64_t, std::vector<Card>> WaitForChange(uint64_t seen, std::chrono::milliseconds timeout,
                                                       const std::function<bool()>& stop) const;
  void Wake() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Card> cards_;
  uint64_t generation_ = 0;
};

}  // namespace mgpu::node
