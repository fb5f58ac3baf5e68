// The device plugin's costs (DESIGN §9), printed as tables:
//  - ListAndWatch: serialized bytes of the mgpu-memory and mgpu-core lists for 1 x 24 GiB, 8 x 24 GiB and
//    8 x 80 GiB nodes at memoryUnitMiB 1, 16 and 64, or the guard's refusal with the unit it suggests.
//  - GetPreferredAllocation + Allocate of a 4096-unit mgpu-memory request, as the fake kubelet calls them
//    over the real unix socket of a running dp::Daemon (with the fake API server): p50 and p99 of the two
//    round trips together, answered from a pending pod's assignment and by the shared allocator.
//  - Plugin start to registered (all three resources) and to streaming (the kubelet holds the three lists),
//    and the same after a kubelet restart (from kubelet.sock's return).
// Run: build/bench/mgpu_plugin_bench [--calls N] [--restarts N]   (defaults 300 and 5)
#include <grpc/grpc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "deviceplugin/daemon.h"
#include "deviceplugin/device_list.h"
#include "node/static_backend.h"
#include "support/assigned_pod.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_kubelet.h"
#include "testing/test_env.h"

namespace mgpu::dp {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr auto kWait = std::chrono::seconds(30);
constexpr int64_t kRequestUnits = 4096;
constexpr int kWarmup = 5;
constexpr char kNodeName[] = "bench-node";
const ResourceNames kNames = Config().Names();

struct Inventory {
  const char* name;
  int cards;
  int64_t memory_mib;
};

std::vector<Card> Cards(const Inventory& inventory) {
  std::vector<Card> cards;
  for (int i = 0; i < inventory.cards; ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%08x-5d1b-4c2e-9f8a-7b6c5d4e3f%02d", 0x1e2c8a30 + i, i);
    cards.push_back(Card{i, uuid, "NVIDIA GPU", inventory.memory_mib, true});
  }
  return cards;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

void ListAndWatchBytes() {
  std::printf("== ListAndWatch response size (kubelet limit %zu bytes)\n", kMaxListAndWatchBytes);
  std::printf("%-12s %8s %14s %26s %16s\n", "inventory", "unit MiB", "memory devices",
              "mgpu-memory list bytes", "mgpu-core bytes");
  for (const Inventory& inventory : {Inventory{"1 x 24 GiB", 1, 24576}, Inventory{"8 x 24 GiB", 8, 24576},
                                     Inventory{"8 x 80 GiB", 8, 81920}}) {
    const std::vector<Card> cards = Cards(inventory);
    for (int64_t unit : {1, 16, 64}) {
      Config config;
      config.memory_unit_mib = unit;
      int64_t devices = 0;
      for (const Card& c : cards) devices += DevicesPerCard(c, Resource::kMemory, config);
      const size_t core = BuildDeviceList(cards, Resource::kCore, config).ByteSizeLong();
      std::string memory;
      if (CheckListAndWatchSize(cards, config).ok()) {
        memory = std::to_string(BuildDeviceList(cards, Resource::kMemory, config).ByteSizeLong());
      } else {
        memory = "refused (suggests unit " + std::to_string(SmallestMemoryUnit(cards, config)) + ")";
      }
      std::printf("%-12s %8lld %14lld %26s %16zu\n", inventory.name, static_cast<long long>(unit),
                  static_cast<long long>(devices), memory.c_str(), core);
    }
  }
}

// One node: its folder, fake kubelet and daemon, against a shared fake API server.
class Node {
 public:
  Node(testing::FakeApiServer& api, Config config, std::vector<Card> cards)
      : api_(api), config_(std::move(config)), cards_(std::move(cards)) {
    std::filesystem::create_directory(dir_.path() + "/dp");
    config_.device_plugin.device_plugin_dir = dir_.path() + "/dp";
    config_.device_plugin.pod_resources_socket = dir_.path() + "/pod-resources.sock";
    config_.device_plugin.metrics_address = "";
    config_.isolation.backend = IsolationBackend::kNone;  // no GPU to isolate
    if (!api_.Get("nodes", "", kNodeName)) (void)api_.Create("nodes", {{"metadata", {{"name", kNodeName}}}});
    kubelet_ = std::make_unique<test::FakeKubelet>(config_.device_plugin.device_plugin_dir,
                                                   config_.device_plugin.pod_resources_socket);
  }

  bool StartKubelet() { return kubelet_->Start().ok(); }

  // Starts a daemon; returns the times to registered and to streaming, or nothing on failure.
  std::optional<std::pair<Clock::duration, Clock::duration>> StartDaemon() {
    daemon_.reset();
    const size_t registrations = kubelet_->Registrations().size();
    std::vector<size_t> lists;
    for (Resource r : kAllResources) lists.push_back(kubelet_->ListsReceived(FullName(r, kNames)));
    const auto start = Clock::now();
    daemon_ = std::make_unique<Daemon>(config_, kNodeName, std::make_unique<node::StaticBackend>(cards_));
    kube::ClusterConfig cluster;
    cluster.server = api_.url();
    if (Status s = daemon_->Start(cluster); !s.ok()) {
      std::fprintf(stderr, "plugin_bench: %s\n", s.message().c_str());
      return std::nullopt;
    }
    if (!kubelet_->WaitForRegistrations(registrations + 3, kWait)) return std::nullopt;
    const auto registered = Clock::now() - start;
    if (!WaitForStreams(lists)) return std::nullopt;
    const auto streaming = Clock::now() - start;
    if (!testing::WaitUntil([&] { return daemon_->Synced(); }, kWait)) return std::nullopt;
    return std::pair{registered, streaming};
  }

  // Restarts the kubelet; returns the times from kubelet.sock's return to registered and to streaming.
  std::optional<std::pair<Clock::duration, Clock::duration>> RestartKubelet() {
    const size_t registrations = kubelet_->Registrations().size();
    std::vector<size_t> lists;
    for (Resource r : kAllResources) lists.push_back(kubelet_->ListsReceived(FullName(r, kNames)));
    if (!kubelet_->Restart().ok()) return std::nullopt;
    const auto start = Clock::now();
    if (!kubelet_->WaitForRegistrations(registrations + 3, kWait)) return std::nullopt;
    const auto registered = Clock::now() - start;
    if (!WaitForStreams(lists)) return std::nullopt;
    return std::pair{registered, Clock::now() - start};
  }

  test::FakeKubelet& kubelet() { return *kubelet_; }

 private:
  bool WaitForStreams(const std::vector<size_t>& before) {
    size_t i = 0;
    for (Resource r : kAllResources) {
      if (!kubelet_->WaitForListsReceived(FullName(r, kNames), before[i++] + 1, kWait)) return false;
    }
    return true;
  }

  testing::FakeApiServer& api_;
  testing::TempDir dir_;
  Config config_;
  const std::vector<Card> cards_;
  std::unique_ptr<test::FakeKubelet> kubelet_;
  std::unique_ptr<Daemon> daemon_;
};

// A pod bound to the bench node whose one container was assigned `units` of memory (and 10% core) on
// `card`, as the extender's bind leaves it.
json AssignedPod(const std::string& name, const std::string& card, int64_t units, int64_t unit_mib,
                 int64_t assume_ns) {
  const Assignment assignment{{ContainerAssignment{"main", {CardShare{card, 10, 0, units * unit_mib}}}}};
  return testing::AssignedPod(name, kNodeName, assignment, unit_mib, assume_ns);
}

// GetPreferredAllocation + Allocate of kRequestUnits memory devices, `calls` times (after a warm-up), each
// container released again so that the node never fills.
bool AllocateLatency(const Inventory& inventory, int64_t unit, bool assigned, int calls) {
  testing::FakeApiServer api;
  if (!api.Start().ok()) return false;
  Config config;
  config.memory_unit_mib = unit;
  config.device_plugin.pod_resources_poll_ms = 600000;  // one answer at start: no patches during the run
  config.device_plugin.pending_pod_wait_ms = assigned ? 5000 : 0;
  const std::vector<Card> cards = Cards(inventory);
  if (assigned) {
    for (int i = 0; i < kWarmup + calls; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "p%05d", i);
      if (!api.Create("pods", AssignedPod(name, cards.back().uuid, kRequestUnits, unit, 1 + i)).ok())
        return false;
    }
  }
  Node node(api, config, cards);
  if (!node.StartKubelet() || !node.StartDaemon()) return false;
  std::mt19937 rng(1);
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + calls; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "p%05d", i);
    auto admitted = node.kubelet().Admit("default", name, "main", {{kNames.memory, kRequestUnits}}, rng);
    if (!admitted.ok()) {
      std::fprintf(stderr, "plugin_bench: %s\n", admitted.message().c_str());
      return false;
    }
    if (assigned && admitted->envs["MGPU_VISIBLE_CARDS"] != cards.back().uuid) {
      std::fprintf(stderr, "plugin_bench: %s was not matched to its assignment\n", name);
      return false;
    }
    if (i >= kWarmup) ms.push_back(Ms(admitted->call_time.at(kNames.memory)));
    node.kubelet().Release("default", name);
  }
  std::printf("%-12s %8lld %-34s %6d %9.2f %9.2f\n", inventory.name, static_cast<long long>(unit),
              assigned ? "matched to a pending pod" : "shared allocator (no pod)", calls, Percentile(ms, 0.5),
              Percentile(ms, 0.99));
  return true;
}

bool StartAndRecovery(int restarts) {
  testing::FakeApiServer api;
  if (!api.Start().ok()) return false;
  Config config;
  config.memory_unit_mib = 16;
  const Inventory inventory{"8 x 80 GiB", 8, 81920};
  Node node(api, config, Cards(inventory));
  if (!node.StartKubelet()) return false;
  std::vector<double> start_registered, start_streaming, restart_registered, restart_streaming;
  for (int i = 0; i < restarts; ++i) {
    auto started = node.StartDaemon();
    if (!started) return false;
    start_registered.push_back(Ms(started->first));
    start_streaming.push_back(Ms(started->second));
  }
  for (int i = 0; i < restarts; ++i) {
    auto recovered = node.RestartKubelet();
    if (!recovered) return false;
    restart_registered.push_back(Ms(recovered->first));
    restart_streaming.push_back(Ms(recovered->second));
  }
  std::printf("== Start and recovery, %s at memoryUnitMiB 16 (%d runs; ms, p50 / max)\n", inventory.name,
              restarts);
  const auto row = [](const char* what, const std::vector<double>& v) {
    std::printf("%-48s %9.2f %9.2f\n", what, Percentile(v, 0.5), *std::max_element(v.begin(), v.end()));
  };
  row("plugin start -> registered (3 resources)", start_registered);
  row("plugin start -> streaming (kubelet holds 3 lists)", start_streaming);
  row("kubelet restart -> registered again", restart_registered);
  row("kubelet restart -> streaming again", restart_streaming);
  return true;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

int Main(int argc, char** argv) {
  int calls = 300;
  int restarts = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--restarts") == 0) restarts = std::max(1, std::atoi(argv[i + 1]));
  }
  spdlog::set_level(spdlog::level::warn);
  // Holds gRPC's library open for the whole run: otherwise the last server of one measurement shuts the
  // library down, which may stall for seconds, and the next one starts it again.
  grpc_init();
  std::printf("machine: %u CPUs, %s\n\n", std::thread::hardware_concurrency(), CpuModel().c_str());
  ListAndWatchBytes();
  std::printf(
      "\n== GetPreferredAllocation + Allocate of %lld mgpu-memory devices over the unix socket (ms)\n",
      static_cast<long long>(kRequestUnits));
  std::printf("%-12s %8s %-34s %6s %9s %9s\n", "inventory", "unit MiB", "answered", "calls", "p50", "p99");
  bool ok = true;
  for (const auto& [inventory, unit] : {std::pair{Inventory{"1 x 24 GiB", 1, 24576}, int64_t{1}},
                                        std::pair{Inventory{"8 x 80 GiB", 8, 81920}, int64_t{16}}}) {
    for (bool assigned : {true, false}) ok = ok && AllocateLatency(inventory, unit, assigned, calls);
  }
  std::printf("\n");
  ok = ok && StartAndRecovery(restarts);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace mgpu::dp

int main(int argc, char** argv) { return mgpu::dp::Main(argc, argv); }
