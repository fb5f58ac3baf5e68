// /metrics (Prometheus text format) and /healthz for the plugin, on devicePlugin.metricsAddress.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/http_server.h"
#include "common/model.h"
#include "common/result.h"
#include "deviceplugin/allocated_pods.h"
#include "deviceplugin/call_counts.h"
#include "guard/state.h"

namespace mgpu::dp {

// One card's guard state (isolation backend mgpu), as read from its state file.
struct GuardCardState {
  std::string uuid;
  bool readable = false;
  guard::CardSnapshot state;
};

struct MetricsSnapshot {
  std::string node;
  std::vector<Card> cards;
  AllocatedPods allocated;
  std::vector<std::pair<std::string, CallCounts>> calls;  // full resource name → counts
  std::vector<GuardCardState> guard;                      // empty unless the backend is mgpu
  bool registered = false;                                // every resource registered with the kubelet
};

// Per card: health, capacity, allocated core / reclaimed core / memory; per pod: GPU share
// (sum over its cards of max(core/100, memory/card memory)); per resource: kubelet calls served; with the
// mgpu backend, per card and per guarded container (its MGPU_CONTAINER_TOKEN): memory used and cap, kernel
// launches, launches throttled to the compute share, offline launches held back and the time they waited,
// and what the guard enforces (the share and policy, whether the share is held, the budget, the release).
std::string RenderMetrics(const MetricsSnapshot& snapshot);

// Reads the guard state file of every card under `state_directory` (isolation.guardStateDirectory).
std::vector<GuardCardState> ReadGuardStates(const std::string& state_directory,
                                            const std::vector<Card>& cards);

// Serves /metrics and /healthz on a bounded server (common/http_server.h): kMetricsWorkers workers, at most
// kMetricsConnectionsPerClient of them per client address, requests whole within 10 s.
inline constexpr int kMetricsWorkers = 4;
inline constexpr int kMetricsConnectionsPerClient = 2;

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
  std::unique_ptr<BoundedHttpServer> server_;
  int port_ = 0;
};

}  // namespace mgpu::dp
