// One node's mgpu node daemon in DRA mode wired together (docs/dra.md §1): the GPU backend and its health
// watcher (shared with the device-plugin mode), the guard's node files, the prepared-claims checkpoint, the
// ResourceSlice publisher and the kubelet plugin. main.cc and the tests start one of these; nothing here is
// process-global, so several run side by side in one process, each with its own kubeletRootDir, cdiDirectory
// and stateDirectory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/result.h"
#include "dra/checkpoint.h"
#include "dra/devices.h"
#include "dra/plugin.h"
#include "dra/prepare.h"
#include "dra/publisher.h"
#include "node/device_state.h"
#include "node/gpu_backend.h"
#include "node/health.h"

namespace mgpu::dra {

class Daemon {
 public:
  // `instance`: this instance's id and ready file (plugin.h); an id lets a second instance run beside it
  // during a rolling update, sharing the checkpoint, the CDI specs and the slices.
  Daemon(Config config, std::string node_name, std::unique_ptr<node::GpuBackend> backend,
         PluginInstance instance = {});
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Discovers the cards, prepares the guard's node files, loads the checkpoint (removing CDI specs no
  // prepared claim owns), starts publishing the node's slices and serves and registers the kubelet plugin. An
  // API server that cannot be reached is retried in the background. Call at most once.
  Status Start(kube::ClusterConfig cluster);
  // Stops every thread and server within seconds; idempotent. The slices, the checkpoint and the CDI specs
  // stay (the other instance of a rolling update, or the next start, serves with them).
  void Stop();

  const std::string& node() const { return node_; }
  std::vector<NodeCard> Cards() const { return cards_; }
  node::GpuBackend& backend() { return *backend_; }
  bool Registered() const { return plugin_ && plugin_->Registered(); }
  const SlicePublisher* publisher() const { return publisher_.get(); }
  Preparer* preparer() { return preparer_.get(); }  // what the kubelet's calls reach

 private:
  class ApiClaims;

  Config config_;
  const std::string node_;
  const PluginInstance instance_;
  std::unique_ptr<node::GpuBackend> backend_;
  std::vector<NodeCard> cards_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<ApiClaims> reader_;
  std::unique_ptr<node::DeviceState> state_;
  std::unique_ptr<node::HealthWatcher> health_;
  std::unique_ptr<PreparedClaims> claims_;
  std::unique_ptr<Preparer> preparer_;
  std::unique_ptr<SlicePublisher> publisher_;
  std::unique_ptr<KubeletPlugin> plugin_;
};

// Deletes every ResourceSlice of `node` for the driver (what a node daemon in device-plugin mode does at
// start, so that no card is offered both ways); returns how many, or the API's error.
Result<int> RemoveNodeSlices(kube::Client& client, const std::string& node, const Config& config);

}  // namespace mgpu::dra
