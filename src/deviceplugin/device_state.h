// The node's cards and their health, shared by the three resource servers, the health watcher and metrics.
// One mutex; readers take snapshots. Every health change bumps a generation that ListAndWatch streams wait
// on. It also remembers the cards of the latest Allocate, so the next resource of the same container can be
// placed beside it (the kubelet admits a container's resources one after another).
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
#include "deviceplugin/devices.h"

namespace mgpu::dp {

class DeviceState {
 public:
  using Clock = std::chrono::steady_clock;

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

  // The cards of the latest Allocate when it was for another resource than `resource` and recent; marks it
  // used by `resource`.
  std::vector<std::string> TakeJustAllocated(Resource resource, Clock::time_point now);
  // Remembers an Allocate; one that completes a pair begun by the remembered one clears it instead, and
  // returns false when the pair's cards differ (the container's resources likely landed on different cards).
  bool RecordAllocation(Resource resource, std::vector<std::string> cards, Clock::time_point now);

 private:
  struct Recent {
    Resource resource;
    std::vector<std::string> cards;
    Clock::time_point at;
    std::optional<Resource> used_by;
  };

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Card> cards_;
  uint64_t generation_ = 0;
  std::optional<Recent> recent_;
};

}  // namespace mgpu::dp
