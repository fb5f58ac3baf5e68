// What the plugin publishes on its Node (DESIGN §7): node/node_metadata.h's inventory annotation, with a
// heartbeat, and labels. A NodePublisher patches them at start, on every health change and every
// devicePlugin.nodeHeartbeatSeconds, on one thread; a failed patch is retried within seconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/background.h"
#include "common/config.h"
#include "common/kube/client.h"
#include "common/model.h"
#include "node/device_state.h"

namespace mgpu::dp {

class NodePublisher {
 public:
  NodePublisher(const Config& config, std::string node, kube::Client& client, const node::DeviceState& state,
                std::string version);
  ~NodePublisher();
  NodePublisher(const NodePublisher&) = delete;
  NodePublisher& operator=(const NodePublisher&) = delete;

  void Start();
  // Returns at once; idempotent.
  void Stop();
  // Once stopped: publishes the inventory saying the plugin is stopping (one patch, bounded by the client's
  // request timeout), so the extender stops choosing this node before the kubelet loses the plugin.
  Status AnnounceStopping();
  // Successful patches so far.
  uint64_t published() const { return published_; }

 private:
  void Run();

  const Config& config_;
  const std::string node_;
  kube::Client& client_;
  const node::DeviceState& state_;
  const std::string version_;
  std::atomic<uint64_t> published_{0};
  BackgroundThread thread_;
};

}  // namespace mgpu::dp
