// The kubelet-facing side (DESIGN §8): one gRPC server and socket per resource in the kubelet's
// device-plugins folder, served before registering, and registered again whenever the kubelet recreates
// kubelet.sock. The servers only translate between the wire and allocation.h / node/environment.h, keeping
// what they handed the kubelet in the one HandOff (hand_off.h) and asking the API-server side for pending
// containers through pending_pods.h; they know nothing of NVML, and nothing below them includes this.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/background.h"
#include "common/config.h"
#include "common/result.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/call_counts.h"
#include "deviceplugin/hand_off.h"
#include "deviceplugin/pending_pods.h"
#include "node/device_state.h"

namespace grpc {
class Server;
}

namespace mgpu::dp {

class DevicePlugin {
 public:
  // `pods` may be null: then every preference comes from the shared allocator. It and `hand_off` must
  // outlive Stop().
  DevicePlugin(Config config, node::DeviceState& state, HandOff& hand_off, PendingPods* pods = nullptr);
  ~DevicePlugin();
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Checks the ListAndWatch size guard, serves the three sockets, registers them with the kubelet (a
  // kubelet that is not there yet is waited for) and starts watching for kubelet restarts.
  Status Start();
  // Stops the servers and the watcher; ListAndWatch streams end. Idempotent.
  void Stop();

  bool Serving() const { return serving_; }
  bool Registered() const { return registered_; }
  CallCounts Counts(Resource resource) const;
  // Socket path of one resource's server.
  std::string SocketPath(Resource resource) const;

  class Service;

 private:
  struct Counters {
    std::atomic<uint64_t> preferred{0}, preferred_matched{0}, preferred_errors{0}, allocate{0},
        allocate_errors{0}, split{0};
  };

  Status StartServers();
  void StopServers();
  bool RegisterAll();
  void WatchKubelet();

  Config config_;
  node::DeviceState& state_;
  HandOff& hand_off_;
  PendingPods* pods_;
  std::mutex servers_mu_;  // serialises starting and stopping the servers
  std::vector<std::unique_ptr<Service>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::array<Counters, 3> counts_;
  std::atomic<bool> serving_{false};
  std::atomic<bool> registered_{false};
  int inotify_fd_ = -1;
  int stop_fd_ = -1;
  BackgroundThread watcher_;
};

}  // namespace mgpu::dp
