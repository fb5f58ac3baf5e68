// /metrics (Prometheus text format) and /healthz for the plugin, on devicePlugin.metricsAddress.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/result.h"
#include "deviceplugin/plugin.h"
#include "deviceplugin/pod_resources.h"

namespace httplib {
class Server;
}

namespace mgpu::dp {

struct MetricsSnapshot {
  std::string node;
  std::vector<Card> cards;
  AllocatedPods allocated;
  std::vector<std::pair<std::string, CallCounts>> calls;  // full resource name → counts
};

// Per card: health, capacity, allocated core / reclaimed core / memory; per pod: GPU share
// (sum over its cards of max(core/100, memory/card memory)); per resource: kubelet calls served.
std::string RenderMetrics(const MetricsSnapshot& snapshot);

class MetricsServer {
 public:
  MetricsServer(std::function<MetricsSnapshot()> snapshot, std::function<bool()> healthy);
  ~MetricsServer();
  // Listens on "host:port"; port 0 picks a free one (see Port()).
  Status Start(const std::string& address);
  void Stop();
  int Port() const { return port_; }

 private:
  std::function<MetricsSnapshot()> snapshot_;
  std::function<bool()> healthy_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace mgpu::dp
