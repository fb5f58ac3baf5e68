// mgpu-device-plugin: advertises a node's cards to the kubelet as mgpu-core, mgpu-memory and
// reclaimed-mgpu-core, hands containers their cards and isolation environment, and publishes the node's
// inventory and the pods' real allocations to the API server. Reads flags and starts a dp::Daemon; with
// --mode dra (or devicePlugin.mode: dra) it is the node's DRA driver instead and starts a dra::Daemon
// (docs/dra.md). The one place that knows both modes: src/node holds what they share, src/deviceplugin and
// src/dra each hold one kubelet API and include neither the other nor this. Either way it first locks
// <isolation.guardStateDirectory>/.node-daemon.lock, so that one node never serves its cards both ways:
// alone, except for DRA instances with an --instance-id (the pod's UID, for a rolling update with maxSurge),
// which hold it together. --ready-file: a file that exists while the kubelet has the DRA instance's
// registration (the DaemonSet's readiness probe).
//   mgpu-device-plugin [--config FILE] [--kubeconfig FILE] [--node-name NAME] [--mode device-plugin|dra]
//                      [--instance-id ID] [--ready-file FILE] [--list-gpus] [--version]
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/kubeconfig.h"
#include "deviceplugin/daemon.h"
#include "dra/daemon.h"
#include "node/make_backend.h"

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"config", "kubeconfig", "node-name", "mode", "instance-id", "ready-file"},
                  {"list-gpus", "version"}, flags)) {
    std::cerr << "usage: mgpu-device-plugin [--config FILE] [--kubeconfig FILE] [--node-name NAME] "
                 "[--mode device-plugin|dra] [--instance-id ID] [--ready-file FILE] [--list-gpus] "
                 "[--version]\n";
    return kExitUsage;
  }
  if (flags.count("version")) {
    std::cout << "mgpu-device-plugin " << MGPU_VERSION << '\n';
    return 0;
  }
  Result<Config> config = flags["config"].empty() ? ParseConfig("") : LoadConfigFile(flags["config"]);
  if (!config.ok()) {
    std::cerr << "mgpu-device-plugin: " << config.message() << '\n';
    return kExitConfig;
  }
  if (!flags["mode"].empty()) {
    auto mode = ParseNodeMode(flags["mode"]);
    if (!mode) {
      std::cerr << "mgpu-device-plugin: --mode must be device-plugin or dra, got \"" << flags["mode"]
                << "\"\n";
      return kExitUsage;
    }
    config->device_plugin.mode = *mode;
  }
  std::string node = flags["node-name"].empty() ? config->device_plugin.node_name : flags["node-name"];
  if (node.empty() && std::getenv("NODE_NAME")) node = std::getenv("NODE_NAME");

  auto backend = node::MakeBackend(config->device_plugin);
  if (!backend.ok()) {
    std::cerr << "mgpu-device-plugin: " << backend.message() << '\n';
    return kExitNoGpuBackend;
  }
  if (flags.count("list-gpus")) {
    auto gpus = (*backend)->Discover();
    if (!gpus.ok()) {
      std::cerr << "mgpu-device-plugin: " << gpus.message() << '\n';
      return kExitNoGpuBackend;
    }
    std::printf("%-5s %-42s %-28s %10s %-7s %5s %s\n", "INDEX", "UUID", "MODEL", "MEMORY_MIB", "HEALTHY",
                "MINOR", "PCI_BUS_ID");
    for (const auto& g : *gpus) {
      std::printf("%-5d %-42s %-28s %10lld %-7s %5d %s\n", g.card.index, g.card.uuid.c_str(),
                  g.card.model.c_str(), static_cast<long long>(g.card.memory_mib),
                  g.card.healthy ? "yes" : "no", g.minor, g.pci_bus_id.empty() ? "-" : g.pci_bus_id.c_str());
    }
    return 0;
  }
  Result<kube::ClusterConfig> cluster = kube::ResolveClusterConfig(flags["kubeconfig"]);
  if (!cluster.ok()) {
    std::cerr << "mgpu-device-plugin: " << cluster.message() << '\n';
    return kExitConfig;
  }

  const NodeMode mode = config->device_plugin.mode;
  const dra::PluginInstance instance{flags["instance-id"], flags["ready-file"]};
  if ((!instance.id.empty() || !instance.ready_file.empty()) && mode != NodeMode::kDra) {
    std::cerr << "mgpu-device-plugin: --instance-id and --ready-file are for --mode dra only\n";
    return kExitUsage;
  }
  if (instance.id.find_first_of("/ \t") != std::string::npos) {
    std::cerr << "mgpu-device-plugin: --instance-id \"" << instance.id
              << "\" is not a pod UID (it names socket files: no slash or space)\n";
    return kExitUsage;
  }
  auto lock =
      FileLock::Take(config->isolation.guard_state_directory + "/.node-daemon.lock",
                     "another mgpu node daemon serves this node's cards (a node serves them through the "
                     "device plugin or DRA, never both; only DRA instances with an --instance-id run together)",
                     instance.id.empty() ? FileLock::Mode::kExclusive : FileLock::Mode::kShared);
  if (!lock.ok()) {
    std::cerr << "mgpu-device-plugin: " << lock.message() << '\n';
    return kExitServe;
  }
  TerminationSignals signals;  // before any thread starts (the API client's resolver starts some)
  if (mode == NodeMode::kDevicePlugin) {
    // A node that served its cards through DRA before: its slices must not offer them a second way.
    kube::ClientOptions options;
    options.request_timeout = std::chrono::seconds(5);
    if (auto client = kube::Client::Create(*cluster, options); client.ok()) {
      auto removed = dra::RemoveNodeSlices(**client, node, *config);
      if (removed.ok() && *removed > 0) spdlog::info("node={} removed {} DRA ResourceSlices", node, *removed);
    }
  }

  std::unique_ptr<dp::Daemon> plugin;
  std::unique_ptr<dra::Daemon> driver;
  Status started;
  if (mode == NodeMode::kDra) {
    driver = std::make_unique<dra::Daemon>(std::move(*config), node, std::move(*backend), instance);
    started = driver->Start(std::move(*cluster));
  } else {
    plugin = std::make_unique<dp::Daemon>(std::move(*config), node, std::move(*backend));
    started = plugin->Start(std::move(*cluster));
  }
  if (!started.ok()) {
    spdlog::error("node={} {}", node, started.message());
    return kExitServe;
  }
  const int signal = signals.Wait();
  spdlog::info("node={} signal {}: stopping", node, signal);
  if (driver) driver->Stop();
  if (plugin) plugin->Stop();
  spdlog::info("node={} stopped", node);
  return 0;
}
