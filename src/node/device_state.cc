#include "node/device_state.h"

namespace mgpu::node {

DeviceState::DeviceState(std::vector<Card> cards) : cards_(std::move(cards)) {}

std::vector<Card> DeviceState::Cards() const {
  std::lock_guard lock(mu_);
  return cards_;
}

uint64_t DeviceState::Generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

bool DeviceState::SetHealthy(const std::string& uuid, bool healthy) {
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    for (Card& c : cards_) {
      if ((uuid.empty() || c.uuid == uuid) && c.healthy != healthy) {
        c.healthy = healthy;
        changed = true;
      }
    }
    if (changed) ++generation_;
  }
  if (changed) changed_.notify_all();
  return changed;
}

std::pair<uint64_t, std::vector<Card>> DeviceState::WaitForChange(uint64_t seen,
                                                                  std::chrono::milliseconds timeout,
                                                                  const std::function<bool()>& stop) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return generation_ != seen || stop(); });
  return {generation_, cards_};
}

void DeviceState::Wake() const {
  std::lock_guard lock(mu_);
  changed_.notify_all();
}

}  // namespace mgpu::node
