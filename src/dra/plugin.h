// The driver's gRPC face toward the kubelet (docs/dra.md §1): the DRAPlugin service (v1) and the health
// service on <dra.kubeletRootDir>/plugins/<driver>/dra.sock, served first; then the plugin watcher's
// Registration service on <dra.kubeletRootDir>/plugins_registry/<driver>-reg.sock, whose GetInfo names the
// first socket. The services only translate between the wire and prepare.h / health.h.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/config.h"
#include "common/result.h"
#include "deviceplugin/device_state.h"
#include "dra/prepare.h"

namespace grpc {
class Server;
}

namespace mgpu::dra {

inline constexpr const char* kDraPluginType = "DRAPlugin";
inline constexpr const char* kDraPluginVersion = "v1.DRAPlugin";

std::string PluginSocketPath(const Config& config);        // .../plugins/<driver>/dra.sock
std::string RegistrationSocketPath(const Config& config);  // .../plugins_registry/<driver>-reg.sock

class HealthService;

class KubeletPlugin {
 public:
  // `preparer` and `state` must outlive Stop().
  KubeletPlugin(const Config& config, std::string pool, Preparer& preparer, const dp::DeviceState& state);
  ~KubeletPlugin();
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  // Serves the plugin socket, then the registration socket (stale sockets of an earlier run are replaced).
  Status Start();
  // Ends health streams, stops both servers and removes the registration socket (the kubelet then
  // unregisters the driver). Idempotent.
  void Stop();

  // The kubelet's last NotifyRegistrationStatus said registered.
  bool Registered() const { return registered_; }
  uint64_t registrations() const { return registrations_; }  // GetInfo calls answered

  class DraService;
  class RegistrationService;

 private:
  const Config& config_;
  const std::string pool_;
  Preparer& preparer_;
  const dp::DeviceState& state_;
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
