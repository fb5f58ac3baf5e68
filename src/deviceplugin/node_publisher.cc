#include "deviceplugin/node_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "node/node_metadata.h"

namespace mgpu::dp {
namespace {

using Clock = std::chrono::steady_clock;
// How soon a failed patch is tried again.
constexpr auto kRetry = std::chrono::seconds(2);
}  // namespace

NodePublisher::NodePublisher(const Config& config, std::string node, kube::Client& client,
                             const node::DeviceState& state, std::string version)
    : config_(config), node_(std::move(node)), client_(client), state_(state), version_(std::move(version)) {}

NodePublisher::~NodePublisher() { Stop(); }

void NodePublisher::Start() {
  thread_.Start([this] { Run(); });
}

void NodePublisher::Stop() {
  thread_.Stop([this] { state_.Wake(); });
}

Status NodePublisher::AnnounceStopping() {
  const int64_t now_s = UnixNowNs() / 1'000'000'000;
  kube::ApiResult result =
      client_.PatchNodeMetadata(node_, node::NodeMetadata(state_.Cards(), config_, version_, now_s, true));
  if (!result.ok())
    return Error{"node " + node_ + ": could not say in " + config_.Names().gpu_inventory +
                 " that the plugin is stopping: " + result.message()};
  spdlog::info("node={} said in {} that the plugin is stopping", node_, config_.Names().gpu_inventory);
  return Status{};
}

void NodePublisher::Run() {
  const auto heartbeat = std::chrono::seconds(config_.device_plugin.node_heartbeat_seconds);
  uint64_t seen = state_.Generation() - 1;  // anything but the current one: publish at once
  auto due = Clock::now();
  bool failing = false;
  while (true) {
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(due - Clock::now(), Clock::duration()));
    auto [generation, cards] = state_.WaitForChange(seen, timeout, [this] { return thread_.stopping(); });
    if (thread_.stopping()) return;
    if (generation == seen && Clock::now() < due) continue;
    seen = generation;
    const int64_t now_s = UnixNowNs() / 1'000'000'000;
    kube::ApiResult result =
        client_.PatchNodeMetadata(node_, node::NodeMetadata(cards, config_, version_, now_s));
    if (result.ok()) {
      if (failing || published_ == 0) {
        spdlog::info("node={} published {} cards in {}", node_, cards.size(), config_.Names().gpu_inventory);
      }
      failing = false;
      published_++;
      due = Clock::now() + heartbeat;
    } else {
      if (!failing) spdlog::warn("node={} cannot publish the GPU inventory: {}", node_, result.message());
      failing = true;
      due = Clock::now() + std::min<Clock::duration>(kRetry, heartbeat);
    }
  }
}

}  // namespace mgpu::dp
