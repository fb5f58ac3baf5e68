// mgpu-device-plugin: advertises a node's cards to the kubelet as mgpu-core, mgpu-memory and
// reclaimed-mgpu-core, and hands containers their cards and isolation environment. Wires the parts together.
//   mgpu-device-plugin [--config FILE] [--node-name NAME] [--list-gpus] [--version]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "common/config.h"
#include "common/daemon.h"
#include "deviceplugin/device_state.h"
#include "deviceplugin/environment.h"
#include "deviceplugin/gpu_backend.h"
#include "deviceplugin/health.h"
#include "deviceplugin/metrics.h"
#include "deviceplugin/plugin.h"
#include "deviceplugin/pod_resources.h"

namespace {

// hami-core containers mount this file as /etc/ld.so.preload: it must exist and name the library.
mgpu::Status EnsureHamiPreload(const mgpu::IsolationConfig& isolation) {
  const std::string path = mgpu::dp::HamiPreloadHostPath(isolation);
  const std::string want = mgpu::dp::HamiPreloadContent(isolation);
  std::ifstream in(path);
  std::stringstream have;
  if (in) have << in.rdbuf();
  if (in && have.str() == want) return mgpu::Status::Ok();
  std::ofstream out(path, std::ios::trunc);
  out << want;
  if (!out.flush())
    return mgpu::Error{"cannot write " + path + ", the ld.so.preload hami-core containers mount"};
  return mgpu::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"config", "node-name"}, {"list-gpus", "version"}, flags)) {
    std::cerr << "usage: mgpu-device-plugin [--config FILE] [--node-name NAME] [--list-gpus] [--version]\n";
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
  auto gpus = (*backend)->Discover();
  if (!gpus.ok()) {
    std::cerr << "mgpu-device-plugin: " << gpus.message() << '\n';
    return kExitNoGpuBackend;
  }
  if (flags.count("list-gpus")) {
    std::printf("%-5s %-42s %-28s %10s %-7s %5s %s\n", "INDEX", "UUID", "MODEL", "MEMORY_MIB", "HEALTHY",
                "MINOR", "PCI_BUS_ID");
    for (const auto& g : *gpus) {
      std::printf("%-5d %-42s %-28s %10lld %-7s %5d %s\n", g.card.index, g.card.uuid.c_str(),
                  g.card.model.c_str(), static_cast<long long>(g.card.memory_mib),
                  g.card.healthy ? "yes" : "no", g.minor, g.pci_bus_id.empty() ? "-" : g.pci_bus_id.c_str());
    }
    return 0;
  }
  if (config->isolation.backend == IsolationBackend::kHamiCore) {
    if (Status s = EnsureHamiPreload(config->isolation); !s.ok()) {
      spdlog::error("{}", s.message());
      return kExitConfig;
    }
  }

  TerminationSignals signals;  // before any thread starts

  std::vector<Card> cards;
  for (const auto& g : *gpus) cards.push_back(g.card);
  spdlog::info("node={} backend={} cards={} isolation={} memoryUnitMiB={}", node, (*backend)->Name(),
               cards.size(), Name(config->isolation.backend), config->memory_unit_mib);
  dp::DeviceState state(cards);
  dp::HealthWatcher health(**backend, state);
  dp::DevicePlugin plugin(*config, state);
  dp::PodResourcesPoller pod_resources(*config);
  dp::MetricsServer metrics(
      [&] {
        dp::MetricsSnapshot s{node, state.Cards(), pod_resources.Latest(), {}};
        for (dp::Resource r : dp::kAllResources)
          s.calls.emplace_back(dp::FullName(r, config->Names()), plugin.Counts(r));
        return s;
      },
      [&] { return plugin.Serving(); });

  if (Status s = plugin.Start(); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitServe;
  }
  health.Start();
  pod_resources.Start();
  if (Status s = metrics.Start(config->device_plugin.metrics_address); !s.ok()) {
    spdlog::error("{}", s.message());
    plugin.Stop();
    return kExitServe;
  }
  const int signal = signals.Wait();
  spdlog::info("signal {}: stopping", signal);
  metrics.Stop();
  pod_resources.Stop();
  health.Stop();
  plugin.Stop();
  spdlog::info("stopped");
  return 0;
}
