// The driver's gRPC face toward the kubelet (docs/dra.md §1): the DRAPlugin service (v1) and the health
// service on <dra.kubeletRootDir>/plugins/<driver>/dra.sock, served first; then the plugin watcher's
// Registration service on <dra.kubeletRootDir>/plugins_registry/<driver>-reg.sock, whose GetInfo names the
// first socket. An instance with an id (the pod's UID, for a DaemonSet's rolling update with maxSurge: the
// pluginwatcher's "Seamless Upgrade") serves on dra-<id>.sock and <driver>-<id>-reg.sock instead, so that the
// kubelet holds both instances at once and neither removes the other's sockets. The services only translate
// between the wire and prepare.h / health.h.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/result.h"
#include "dra/prepare.h"
#include "node/device_state.h"

namespace grpc {
class Server;
}

namespace mgpu::dra {

inline constexpr const char* kDraPluginType = "DRAPlugin";
inline constexpr const char* kDraPluginVersion = "v1.DRAPlugin";

// Who this instance is: `id` empty for the one instance of a node; else its own, unique among the
// instances that ever run on the node (the pod's UID). `ready_file`, when set, exists while the kubelet has
// this instance's registration (a DaemonSet's readiness probe tests it).
struct PluginInstance {
  std::string id;
  std::string ready_file;
};

std::string PluginSocketPath(const Config& config, const std::string& instance = "");  // .../dra[-<id>].sock
// .../plugins_registry/<driver>[-<id>]-reg.sock
std::string RegistrationSocketPath(const Config& config, const std::string& instance = "");

// Removes the sockets of the driver's other instances that nobody answers on (a pod killed without its
// SIGTERM leaves them, and the kubelet keeps a registration for each), and this instance's own sockets of an
// earlier run (a restarted container keeps its pod's UID). Sockets someone answers on stay: they are a live
// instance's. Returns the paths removed.
std::vector<std::string> RemoveStaleSockets(const Config& config, const std::string& instance);
// Someone answers on the registration socket of instance `id` (it is alive).
bool InstanceAnswers(const Config& config, const std::string& id);

class HealthService;

class KubeletPlugin {
 public:
  // `preparer` and `state` must outlive Stop().
  KubeletPlugin(const Config& config, std::string pool, Preparer& preparer, const node::DeviceState& state,
                PluginInstance instance = {});
  ~KubeletPlugin();
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  // Serves the plugin socket, then the registration socket (after RemoveStaleSockets).
  Status Start();
  // Ends health streams, stops both servers and removes both sockets and the ready file (the kubelet then
  // unregisters this instance; the driver stays registered while another instance is). Idempotent.
  void Stop();

  // The kubelet's last NotifyRegistrationStatus said registered.
  bool Registered() const { return registered_; }
  uint64_t registrations() const { return registrations_; }  // GetInfo calls answered

  class DraService;
  class RegistrationService;

 private:
  const Config& config_;
  const std::string pool_;
  const PluginInstance instance_;
  Preparer& preparer_;
  const node::DeviceState& state_;
  std::mutex mu_;  // serialises Start and Stop
  std::unique_ptr<DraService> dra_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<RegistrationService> registration_;
  std::unique_ptr<grpc::Server> plugin_server_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::atomic<bool> registered_{false};
  std::atomic<uint64_t> registrations_{0};
};

}  // namespace mgpu::dra
