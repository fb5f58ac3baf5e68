// mgpu-demo: a whole mgpu cluster on this machine, no Kubernetes needed (src/testing/local_cluster.h): the
// fake API server, the scheduler extender, a device plugin and a kubelet per sample node, and a
// kube-scheduler stand-in calling the extender with kube-scheduler's JSON. It submits the workloads,
// schedules them, lets the kubelets admit them through the plugins, then prints where each pod landed, each
// container's environment and `kubectl mgpu nodes`, and checks that every environment matches what its pod
// holds (gpu-allocated, else gpu-assignment) and that no card is over-committed (exit code 1 when not).
//   mgpu-demo --nodes FILE --workloads FILE [--config FILE] [--keep-running] [--verbose]
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/kubectl_mgpu.h"
#include "common/codec.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/file.h"
#include "common/manifest.h"
#include "common/text_table.h"
#include "testing/local_cluster.h"
#include "testing/test_env.h"

namespace mgpu {
namespace {

using nlohmann::json;

constexpr char kUsage[] =
    "usage: mgpu-demo --nodes FILE --workloads FILE [--config FILE] [--keep-running] [--verbose]\n";

std::string Annotation(const json& object, const std::string& key) {
  const Annotations annotations = AnnotationsOf(object);
  auto it = annotations.find(key);
  return it == annotations.end() ? "" : it->second;
}

// "server: card 0 (mgpu-core 30, mgpu-memory 4096 MiB)".
std::string CardsText(const Assignment& assignment, const std::map<std::string, int>& index_of) {
  return DescribeAssignment(assignment, [&index_of](const std::string& uuid) {
    auto index = index_of.find(uuid);
    return index == index_of.end() ? uuid : "card " + std::to_string(index->second);
  });
}

void PrintPlacements(testing::LocalCluster& cluster, const std::vector<std::string>& pods,
                     const std::map<std::string, testing::SchedulingOutcome>& outcomes) {
  std::map<std::string, int> index_of;
  for (const testing::LocalNode& node : cluster.nodes())
    for (const Card& card : node.cards) index_of[card.uuid] = card.index;
  const ResourceNames names = cluster.config().Names();
  std::vector<std::vector<std::string>> rows = {
      {"POD", "NODE", "STATUS",
       "CARDS (from " + names.gpu_allocated + ", else " + names.gpu_assignment + "), OR WHY NOT"}};
  for (const std::string& key : pods) {
    const std::string ns = key.substr(0, key.find('/')), name = key.substr(key.find('/') + 1);
    const json pod = cluster.api().Get("pods", ns, name).value_or(json::object());
    const std::string node = pod.value("spec", json::object()).value("nodeName", "");
    const json status = pod.value("status", json::object());
    std::string detail;
    // The plugin writes gpu-allocated only where the kubelet's devices differ from the assignment.
    std::string held = Annotation(pod, names.gpu_allocated);
    if (held.empty() && status.value("phase", "") == "Running") held = Annotation(pod, names.gpu_assignment);
    if (Result<Assignment> allocated = DecodeAssignment(held); allocated.ok())
      detail = CardsText(*allocated, index_of);
    else if (!status.value("message", "").empty())
      detail = status.value("message", "");
    else if (auto it = outcomes.find(key); it != outcomes.end())
      detail = it->second.message;
    rows.push_back({key, node.empty() ? "-" : node, status.value("phase", "Pending"), detail});
  }
  std::cout << FormatTable(rows);
}

void PrintEnvironments(const testing::LocalCluster& cluster) {
  std::cout
      << "\nEach GPU container's environment (the kubelet's merge of the plugin's Allocate responses):\n";
  for (const auto& [key, pod] : cluster.Admitted()) {
    for (const testing::AdmittedContainer& container : pod.containers) {
      std::cout << "  " << key << " container " << container.name << " on " << pod.node << ":\n";
      for (const auto& [name, value] : container.admission.envs)
        std::cout << "      " << name << "=" << value << "\n";
    }
  }
}

int Run(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"nodes", "workloads", "config"}, {"keep-running", "verbose"}, flags) ||
      flags["nodes"].empty() || flags["workloads"].empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  spdlog::set_level(flags.count("verbose") ? spdlog::level::info : spdlog::level::warn);
  Result<Config> config = flags["config"].empty() ? ParseConfig("") : LoadConfigFile(flags["config"]);
  if (!config.ok()) return std::cerr << "mgpu-demo: " << config.message() << "\n", kExitConfig;
  Result<std::string> nodes_text = ReadFile(flags["nodes"]);
  if (!nodes_text.ok()) return std::cerr << "mgpu-demo: " << nodes_text.message() << "\n", kExitConfig;
  Result<std::vector<SampleNode>> samples = SampleNodesOf(*nodes_text);
  if (!samples.ok())
    return std::cerr << "mgpu-demo: " << flags["nodes"] << ": " << samples.message() << "\n", kExitConfig;
  Result<std::string> workloads = ReadFile(flags["workloads"]);
  if (!workloads.ok()) return std::cerr << "mgpu-demo: " << workloads.message() << "\n", kExitConfig;

  std::optional<TerminationSignals> signals;
  if (flags.count("keep-running")) signals.emplace();  // before any thread starts
  testing::TempDir work_dir;
  testing::LocalClusterOptions options;
  options.config = *config;
  options.work_dir = work_dir.path();
  for (const SampleNode& sample : *samples) {
    if (sample.inventory.memory_unit_mib != config->memory_unit_mib) {
      std::cerr << "mgpu-demo: node " << sample.name << " in " << flags["nodes"] << " records memoryUnitMiB "
                << sample.inventory.memory_unit_mib << " but the config says " << config->memory_unit_mib
                << "; the unit is cluster-wide\n";
      return kExitConfig;
    }
    options.nodes.push_back({sample.name, sample.inventory.cards});
  }

  testing::LocalCluster cluster(options);
  if (Status s = cluster.Start(); !s.ok())
    return std::cerr << "mgpu-demo: " << s.message() << "\n", kExitServe;
  std::cout << "A local mgpu cluster: fake API server at " << cluster.api().url()
            << ", mgpu-scheduler-extender, and per node an mgpu-device-plugin and a kubelet:\n";
  for (const testing::LocalNode& node : cluster.nodes()) {
    int healthy = 0;
    for (const Card& card : node.cards) healthy += card.healthy;
    std::cout << "  " << node.name << ": " << node.cards.size() << " × " << node.cards.front().model << " ("
              << node.cards.front().memory_mib << " MiB), " << healthy << " healthy\n";
  }
  std::cout << "resource domain " << config->resource_domain << ", memoryUnitMiB " << config->memory_unit_mib
            << "\n\n";

  Result<std::vector<std::string>> pods = cluster.Submit(*workloads);
  if (!pods.ok())
    return std::cerr << "mgpu-demo: " << flags["workloads"] << ": " << pods.message() << "\n", kExitConfig;
  std::cout << "Submitted " << flags["workloads"] << ": " << pods->size()
            << " pods; scheduling them through the extender (filter, prioritize, bind)...\n\n";
  const std::map<std::string, testing::SchedulingOutcome> outcomes = cluster.SchedulePending();
  if (!cluster.WaitSettled(std::chrono::seconds(60)))
    std::cerr << "mgpu-demo: the kubelets did not settle in 60 s\n";

  PrintPlacements(cluster, *pods, outcomes);
  PrintEnvironments(cluster);
  std::cout << "\n$ kubectl mgpu nodes\n";
  const int shown = cli::Run({"nodes", "--kubeconfig", cluster.kubeconfig_path()}, std::cout, std::cerr);
  const Status consistent = cluster.CheckConsistency();
  std::cout << "\nCheck: "
            << (consistent.ok() ? "every container's environment matches the cards its pod holds "
                                  "and the extender's choice, and no card is over-committed"
                                : "FAILED: " + consistent.message())
            << "\n";

  const std::string cli_dir =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "cli").string();
  if (!signals) {
    std::cout << "\nTo use kubectl mgpu against the demo cluster, keep it running: add --keep-running to "
                 "this command (bash scripts/run.sh --keep-running)\n";
  } else {
    std::cout << "\nThe cluster keeps running until Ctrl-C. In another shell:\n"
              << "  export KUBECONFIG=" << cluster.kubeconfig_path() << " PATH=" << cli_dir << ":$PATH\n"
              << "  kubectl mgpu nodes        # or kubectl-mgpu nodes -o json, without kubectl" << std::endl;
    signals->Wait();
  }
  cluster.Stop();
  return consistent.ok() && shown == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mgpu

int main(int argc, char** argv) { return mgpu::Run(argc, argv); }
