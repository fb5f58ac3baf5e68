// One node's mgpu-device-plugin wired together: the GPU backend and its health watcher, the three resource
// servers registered with the kubelet, the PodResources poller, what the servers handed out (hand_off.h),
// the pod tracker (the hand-off of DESIGN §5 and D/gpu-allocated), the node publisher (§7) and /metrics.
// main.cc and the tests start one of these. Nothing here is process-global: several daemons run side by side
// in one process (one per simulated node), each with its own devicePluginDir, podResourcesSocket, backend and
// metricsAddress.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/result.h"
#include "deviceplugin/hand_off.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/node_publisher.h"
#include "deviceplugin/plugin.h"
#include "deviceplugin/pod_resources.h"
#include "deviceplugin/pod_tracker.h"
#include "node/device_state.h"
#include "node/gpu_backend.h"
#include "node/health.h"

namespace mgpu::dp {

class Daemon {
 public:
  // `backend` finds the node's cards (in Start) and reports their health.
  Daemon(Config config, std::string node_name, std::unique_ptr<node::GpuBackend> backend);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Discovers the cards and checks them against the kubelet's 4 MiB limit, then starts watching the node's
  // pods and publishing the node, serves and registers the resources (a kubelet that is not there yet is
  // waited for in the background) and serves /metrics on devicePlugin.metricsAddress (empty: none; port 0:
  // a free one, see metrics_port()). An API server that cannot be reached is retried in the background.
  // Call at most once.
  Status Start(kube::ClusterConfig cluster);
  // Stops every thread and server within seconds; idempotent.
  void Stop();

  const std::string& node() const { return node_; }
  node::GpuBackend& backend() { return *backend_; }
  std::vector<Card> Cards() const;
  int metrics_port() const;       // 0 without /metrics
  bool Registered() const;        // every resource registered with the kubelet
  bool Synced() const;            // the pod watch has listed and the kubelet's PodResources has answered
  uint64_t Publications() const;  // successful patches of the node's inventory and labels
  CallCounts Counts(Resource resource) const;

 private:
  Config config_;
  const std::string node_;
  std::unique_ptr<node::GpuBackend> backend_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<node::DeviceState> state_;
  std::unique_ptr<node::HealthWatcher> health_;
  std::unique_ptr<PodResourcesPoller> pod_resources_;
  std::unique_ptr<HandOff> hand_off_;
  std::unique_ptr<PodTracker> pods_;
  std::unique_ptr<DevicePlugin> plugin_;
  std::unique_ptr<NodePublisher> publisher_;
  std::unique_ptr<MetricsServer> metrics_;
};

}  // namespace mgpu::dp
