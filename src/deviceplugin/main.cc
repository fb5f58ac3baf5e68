// mgpu-device-plugin: advertises a node's cards to the kubelet as mgpu-core, mgpu-memory and
// reclaimed-mgpu-core, hands containers their cards and isolation environment, and publishes the node's
// inventory and the pods' real allocations to the API server. Reads flags and starts a dp::Daemon.
//   mgpu-device-plugin [--config FILE] [--kubeconfig FILE] [--node-name NAME] [--list-gpus] [--version]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/kubeconfig.h"
#include "deviceplugin/daemon.h"
#include "deviceplugin/make_backend.h"

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"config", "kubeconfig", "node-name"}, {"list-gpus", "version"}, flags)) {
    std::cerr << "usage: mgpu-device-plugin [--config FILE] [--kubeconfig FILE] [--node-name NAME] "
                 "[--list-gpus] [--version]\n";
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
  std::string node = flags["node-name"].empty() ? config->device_plugin.node_name : flags["node-name"];
  if (node.empty() && std::getenv("NODE_NAME")) node = std::getenv("NODE_NAME");

  auto backend = dp::MakeBackend(config->device_plugin);
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

  TerminationSignals signals;  // before any thread starts
  dp::Daemon daemon(std::move(*config), node, std::move(*backend));
  if (Status s = daemon.Start(std::move(*cluster)); !s.ok()) {
    spdlog::error("node={} {}", node, s.message());
    return kExitServe;
  }
  const int signal = signals.Wait();
  spdlog::info("node={} signal {}: stopping", node, signal);
  daemon.Stop();
  spdlog::info("node={} stopped", node);
  return 0;
}
