#include "node/health.h"

#include <spdlog/spdlog.h>

namespace mgpu::node {

namespace {
constexpr auto kWait = std::chrono::milliseconds(500);
}  // namespace

void HealthWatcher::Start() {
  thread_.Start([this] { Run(); });
}

void HealthWatcher::Stop() { thread_.Stop(); }

void HealthWatcher::Run() {
  bool reported_failure = false;
  while (!thread_.stopping()) {
    auto event = backend_.WaitHealthEvent(kWait);
    if (!event.ok()) {
      // Health cannot be watched: say so once, keep serving with the last known health.
      if (!reported_failure) spdlog::error("health events unavailable: {}", event.message());
      reported_failure = true;
      thread_.SleepFor(kWait);
      continue;
    }
    if (!event->has_value()) continue;
    const HealthEvent& e = **event;
    if (state_.SetHealthy(e.card_uuid, e.healthy)) {
      const std::string card = e.card_uuid.empty() ? "(all)" : e.card_uuid;
      if (e.healthy) {
        spdlog::info("card={} healthy again: {}", card, e.reason);
      } else {
        spdlog::warn("card={} unhealthy: {}", card, e.reason);
      }
    }
  }
}

}  // namespace mgpu::node
