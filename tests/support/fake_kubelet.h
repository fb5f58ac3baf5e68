// A kubelet as the device plugin sees it (DESIGN §8), for tests: the Registration server on
// <dir>/kubelet.sock (dials back, asks GetDevicePluginOptions inside Register, then follows ListAndWatch),
// a client that admits containers the way the kubelet does, and a PodResources server reporting what it
// allocated. Restart() behaves like a kubelet restart: every socket in the folder is deleted and kubelet.sock
// created again.
// What it still exists for, now that tests/realcluster/ runs the real kubelet v1.36.2: the device plugin's
// tests call GetPreferredAllocation and Allocate in any order and at any moment (mid-restart, two containers
// interleaved), restart the kubelet between two calls of one container, and run several kubelets in one
// process; a real kubelet decides its own order, runs one per machine and needs the binaries.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"

namespace grpc {
class Server;
}

namespace mgpu::test {

class FakeKubelet {
 public:
  struct Registration {
    std::string version;
    std::string endpoint;
    std::string resource_name;
    bool preferred_allocation_available = false;
  };

  struct Mount {
    std::string container_path;
    std::string host_path;
    bool read_only = false;
  };

  // What a container got, merged over its resources the way the kubelet merges Allocate responses.
  struct Admission {
    std::map<std::string, std::vector<std::string>> devices;  // resource → device IDs
    std::map<std::string, std::string> envs;                  // the first value of a variable wins
    std::vector<std::string> env_conflicts;                   // variables later responses set differently
    std::vector<Mount> mounts;                                // one per container path
    std::vector<std::string> order;                           // resources in the order admitted
    // Per resource, the GetPreferredAllocation and Allocate round trips together (the plugin's time).
    std::map<std::string, std::chrono::nanoseconds> call_time;
  };

  // `dir`: the device-plugins folder; `pod_resources_socket`: where the PodResources server listens.
  FakeKubelet(std::string dir, std::string pod_resources_socket);
  ~FakeKubelet();

  Status Start();
  void Stop();
  // Stop, delete every socket in the folder, Start.
  Status Restart();

  std::vector<Registration> Registrations() const;
  bool WaitForRegistrations(size_t total, std::chrono::milliseconds timeout) const;

  // The latest ListAndWatch list of `resource` (device ID → health), and how many lists it sent.
  std::map<std::string, std::string> Devices(const std::string& resource) const;
  size_t ListsReceived(const std::string& resource) const;
  bool WaitForListsReceived(const std::string& resource, size_t count,
                            std::chrono::milliseconds timeout) const;
  // Serialized size of the latest ListAndWatchResponse of `resource`.
  size_t LastListBytes(const std::string& resource) const;
  // PodResources List calls received so far (to wait for a plugin's next polls).
  size_t PodResourcesLists() const;
  // A slow kubelet: while paused, PodResources List calls wait (Stop ends the pause).
  void PausePodResources(bool paused);
  bool WaitForLists(const std::string& resource,
                    const std::function<bool(const std::map<std::string, std::string>&)>& done,
                    std::chrono::milliseconds timeout) const;

  // Admits one container asking `resources` (full resource name → amount): per resource, in an order drawn
  // from `rng`, GetPreferredAllocation over the available devices (healthy minus allocated), then Allocate of
  // the preferred IDs. The first error (from the plugin, or preferred IDs that are not available) fails it.
  Result<Admission> Admit(const std::string& pod_namespace, const std::string& pod,
                          const std::string& container, const std::map<std::string, int64_t>& resources,
                          std::mt19937& rng);
  // Records devices as held without admitting them (as if admitted before the plugin started): PodResources
  // reports them.
  void Hold(const std::string& pod_namespace, const std::string& pod, const std::string& container,
            const std::string& resource, std::vector<std::string> device_ids);
  // Forgets a pod's devices, as when the pod is deleted: they are available again.
  void Release(const std::string& pod_namespace, const std::string& pod);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgpu::test
