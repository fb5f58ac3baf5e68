// mgpu-place: runs the extender's placement core (common/scheduler.h) over sample nodes and pod manifests,
// the way the extender's filter, prioritize and bind would (the workload model learned and published as the
// extender does), and prints where every pod lands. No cluster needed. The manifests write mgpu-memory in MiB,
// as users do; each pod is read as the admission webhook stores it (common/request.h, MemoryRewriteOf).
//   mgpu-place --nodes deploy/examples/nodes.yaml --pods deploy/examples/workloads.yaml [--config F]
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/config.h"
#include "common/file.h"
#include "common/manifest.h"
#include "common/pod_facts.h"
#include "common/request.h"
#include "common/scheduler.h"

namespace mgpu {
namespace {

Result<std::vector<NodeState>> LoadNodes(const std::string& path, const Config& config) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.error();
  auto samples = SampleNodesOf(*text);
  if (!samples.ok()) return Error{path + ": " + samples.message()};
  std::vector<NodeState> nodes;
  for (const SampleNode& n : *samples) nodes.push_back(MakeNodeState(n.name, n.inventory, config));
  return nodes;
}

// "main: card 0 (mgpu-core 30, mgpu-memory 4096 MiB)".
std::string Shares(const NodeState& node, const Assignment& a) {
  return DescribeAssignment(a, [&node](const std::string& uuid) {
    const CardState* card = node.FindCard(uuid);
    return card ? "card " + std::to_string(card->card.index) : uuid;
  });
}

int Run(int argc, char** argv) {
  std::string nodes_file, pods_file, config_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "--nodes")
      ok = next(nodes_file);
    else if (arg == "--pods")
      ok = next(pods_file);
    else if (arg == "--config")
      ok = next(config_file);
    else
      ok = false;
    if (!ok) {
      std::cerr << "usage: mgpu-place --nodes FILE --pods FILE [--config FILE]\n";
      return 2;
    }
  }
  if (nodes_file.empty() || pods_file.empty()) {
    std::cerr << "usage: mgpu-place --nodes FILE --pods FILE [--config FILE]\n";
    return 2;
  }
  auto config = config_file.empty() ? Result<Config>(Config()) : LoadConfigFile(config_file);
  if (!config.ok()) return std::cerr << config.message() << "\n", 1;
  auto nodes = LoadNodes(nodes_file, *config);
  if (!nodes.ok()) return std::cerr << nodes.message() << "\n", 1;
  auto text = ReadFile(pods_file);
  if (!text.ok()) return std::cerr << text.message() << "\n", 1;
  auto pods = PodsOfManifests(*text);
  if (!pods.ok()) return std::cerr << pods_file << ": " << pods.message() << "\n", 1;

  int placed = 0, failed = 0;
  ModelPublisher publisher;
  Placement scratch;
  std::vector<NodeState*> candidates;
  for (NodeState& node : *nodes) candidates.push_back(&node);
  // Equal top scores: the first node listed.
  const auto first = [](size_t) { return size_t{0}; };
  for (ManifestPod& m : *pods) {
    m.pod = m.pod.patch(MemoryRewriteOf(m.pod, *config, m.workload));  // as the webhook stores it
    const PodFacts pod = ReadPod(m.pod, *config, m.workload);
    const Result<PodRequest>& req = pod.request;
    if (!req.ok()) {
      std::cout << "REJECTED  " << req.message() << "\n";
      ++failed;
      continue;
    }
    if (!req->AsksForGpu()) continue;
    // Filter: learn the pod and decide every node; prioritize: the extender's scores; bind: the best node
    // gets the cards the model chooses.
    const Result<Scheduled> scheduled = ScheduleOne(
        candidates, *req, publisher, [&nodes] { return ClusterFreeOf(*nodes); }, /*with_reasons=*/true, first,
        scratch);
    if (!scheduled.ok()) return std::cerr << scheduled.message() << "\n", 1;
    if (scheduled->node == Scheduled::kNowhere) {
      std::string reasons;
      for (size_t i = 0; i < nodes->size(); ++i)
        reasons += "\n          " + (*nodes)[i].name + ": " + scheduled->decisions[i].reason;
      std::cout << "PENDING   " << pod.key << " fits no node:" << reasons << "\n";
      ++failed;
      continue;
    }
    const NodeState& node = (*nodes)[scheduled->node];
    std::cout << "PLACED    " << pod.key << " (" << Name(req->qos) << ", " << Name(req->compute_policy)
              << ") on " << node.name << ": " << Shares(node, scheduled->assignment) << "\n";
    ++placed;
  }
  std::cout << "\nnode       card  model                   health     core  reclaimed  memory MiB\n";
  for (const NodeState& node : *nodes) {
    for (const CardState& c : node.cards) {
      std::printf("%-10s %4d  %-22s  %-9s  %3d%%  %8d%%  %6lld/%lld\n", node.name.c_str(), c.card.index,
                  c.card.model.c_str(), c.card.healthy ? "healthy" : "unhealthy", c.usage.core,
                  c.usage.reclaimed_core, static_cast<long long>(c.usage.memory_mib),
                  static_cast<long long>(c.capacity_mib));
    }
  }
  std::cout << "\n" << placed << " placed, " << failed << " not placed\n";
  return 0;
}

}  // namespace
}  // namespace mgpu

int main(int argc, char** argv) { return mgpu::Run(argc, argv); }
