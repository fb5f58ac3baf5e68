// The kubelet-facing side (DESIGN §8): one gRPC server and socket per resource in the kubelet's
// device-plugins folder, served before registering, and registered again whenever the kubelet recreates
// kubelet.sock. The servers only translate between the wire and allocation.h / environment.h; they know
// nothing of NVML.
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
#include "deviceplugin/device_state.h"

namespace grpc {
class Server;
}

namespace mgpu::dp {

// The API-server side of the hand-off (DESIGN §5) as the resource servers use it. Called from the gRPC
// threads, concurrently.
class PendingPods {
 public:
  virtual ~PendingPods() = default;
  // Containers bound to this node with an assignment that have not been allocated `resource` yet (step 2),
  // for a kubelet asking `size` devices. May block for a bounded time while no pod here asks that many.
  virtual std::vector<PendingContainer> Candidates(Resource resource, int64_t size) = 0;
  // The kubelet's Allocate took the IDs that GetPreferredAllocation matched to `container`.
  virtual void Allocated(Resource resource, const PendingContainer& container) = 0;
  // A GetPreferredAllocation or Allocate was refused; `container` is the one it concerned, when known.
  virtual void Refused(Resource resource, const PendingContainer* container, const std::string& message) = 0;
};

// Calls served per resource, for /metrics.
struct CallCounts {
  uint64_t preferred = 0;
  uint64_t preferred_matched = 0;  // answered from a pending pod's assignment
  uint64_t preferred_errors = 0;
  uint64_t allocate = 0;
  uint64_t allocate_errors = 0;
  uint64_t split = 0;  // a container's second resource landed on other cards than its first
};

class DevicePlugin {
 public:
  // `pods` may be null: then every preference comes from the shared allocator. It must outlive Stop().
  DevicePlugin(Config config, DeviceState& state, PendingPods* pods = nullptr);
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
  DeviceState& state_;
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
