// mgpu-dra-slices: publishes the DRA ResourceSlices of nodes that have no node daemon, for scale tests and
// benchmarks against a real kube-scheduler (tests/dra/, bench/realcluster_dra.sh): every node matching the
// selector gets the slices mgpu's node daemon would publish (dra/slices.h) for the cards of its
// D/gpu-inventory annotation (what mgpu-api-nodes writes). One pass; exits 0 when every node's pool was
// written.
//   mgpu-dra-slices --kubeconfig FILE [--selector mgpu.io/api-only=true] [--config FILE] [--threads 8]
#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/codec.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "dra/devices.h"
#include "dra/publisher.h"

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"kubeconfig", "selector", "config", "threads"}, {}, flags) ||
      flags["kubeconfig"].empty()) {
    std::cerr
        << "usage: mgpu-dra-slices --kubeconfig FILE [--selector LABELS] [--config FILE] [--threads N]\n";
    return kExitUsage;
  }
  Result<Config> config = flags["config"].empty() ? ParseConfig("") : LoadConfigFile(flags["config"]);
  Result<kube::ClusterConfig> cluster = kube::ResolveClusterConfig(flags["kubeconfig"]);
  if (!config.ok() || !cluster.ok()) {
    std::cerr << "mgpu-dra-slices: " << (config.ok() ? cluster.message() : config.message()) << '\n';
    return kExitConfig;
  }
  auto client = kube::Client::Create(*cluster);
  if (!client.ok()) {
    std::cerr << "mgpu-dra-slices: " << client.message() << '\n';
    return kExitConfig;
  }
  const std::string selector = flags["selector"].empty() ? "mgpu.io/api-only=true" : flags["selector"];
  kube::ApiResult nodes = (*client)->ListNodes({.label_selector = selector});
  if (!nodes.ok()) {
    std::cerr << "mgpu-dra-slices: " << nodes.message() << '\n';
    return 1;
  }
  const kube::Json items = nodes->value("items", kube::Json::array());
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  std::mutex mu;
  std::vector<std::thread> threads;
  const int count = flags["threads"].empty() ? 8 : std::max(1, std::stoi(flags["threads"]));
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < items.size();) {
        const std::string name = MetadataString(items[i], "name");
        const kube::Json* annotations = FindPath(items[i], {"metadata", "annotations"});
        auto inventory =
            DecodeInventory(annotations ? annotations->value(config->Names().gpu_inventory, "") : "");
        Status s = Status::Ok();
        if (inventory.ok()) {
          std::vector<node::GpuInfo> gpus;
          for (const Card& c : inventory->cards) gpus.push_back({c, -1, ""});
          s = dra::PublishOnce(**client, name, dra::NodeCardsOf(gpus, *config), *config);
        } else {
          s = inventory.error();
        }
        if (s.ok()) continue;
        failed++;
        std::lock_guard lock(mu);
        std::cerr << "mgpu-dra-slices: node " << name << ": " << s.message() << '\n';
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("mgpu-dra-slices: %zu nodes, %d failed\n", items.size(), failed.load());
  return failed == 0 ? 0 : 1;
}
