// mgpu-api-nodes: nodes that exist only in a real API server, for scale tests and benchmarks against a real
// kube-scheduler (scripts/cluster.sh --api-nodes). Each node is what a kubelet and mgpu's device plugin would
// make of a GPU machine: a Node with cpu, memory, pods and the three mgpu resources in its capacity and
// allocatable (the plugin's device counts), the Ready condition, the plugin's D/gpu-inventory annotation and
// gpu.* labels (the node daemon's own NodeMetadata), and the label mgpu.io/api-only=true. Its Lease in
// kube-node-lease is renewed every --lease-renew-s (the nodes' renewals spread over that period), as a
// kubelet does, so the node lifecycle controller keeps it Ready. With --confirm-after-ms, it also writes,
// that long after it sees a pod bound to one of its nodes with a D/gpu-assignment, the assignment as
// D/gpu-allocated: the confirmation the device plugin wrote for every GPU pod before issue 27 (it now writes
// gpu-allocated only where the kubelet's devices differ, which here they never do), for comparing what it
// cost (bench/realcluster_bind.sh --delay-ms). Runs until SIGTERM; nodes that exist already are updated,
// not recreated.
//   mgpu-api-nodes --kubeconfig FILE --nodes N [--cards 2x24576[,8x81920,...]] [--config FILE]
//                  [--prefix api-node-] [--confirm-after-ms MS] [--lease-renew-s 20]
//   mgpu-api-nodes --kubeconfig FILE --node-list FILE [--config FILE] [--confirm-after-ms MS] ...
// Shapes: COUNTxMiB per node, taken in turn (node i gets shape i mod the number of shapes); each node has
// 64 CPUs and 512 GiB, its cards the model mgpu-api-NNg. --node-list instead names every node and its shape:
// a CSV with a header line, then name,cpu_milli,memory_mib,cards,model,card_mib per node (the cluster of a
// trace: mgpu_trace_replay --export writes one).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/background.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/client.h"
#include "common/kube/informer.h"
#include "common/kube/kubeconfig.h"
#include "deviceplugin/devices.h"
#include "node/node_metadata.h"

namespace mgpu {
namespace {

using kube::Json;
using Clock = std::chrono::steady_clock;

// One node: its name, CPU and memory, and its cards (all of one model).
struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 64000;
  int64_t memory_mib = 512 * 1024;
  int cards = 0;
  std::string model;
  int64_t card_mib = 0;
};

Result<std::vector<NodeSpec>> ParseShapes(const std::string& text) {
  std::vector<NodeSpec> shapes;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    NodeSpec s;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%dx%ld%c", &s.cards, &s.card_mib, &tail) != 2 || s.cards < 1 ||
        s.cards > 64 || s.card_mib < 1)
      return Error{"--cards: '" + item + "' is not COUNTxMiB (e.g. 8x81920) with 1 to 64 cards"};
    s.model = "mgpu-api-" + std::to_string(s.card_mib / 1024) + "g";
    shapes.push_back(s);
    start = comma + 1;
  }
  return shapes;
}

// --nodes and --cards: `count` nodes named `prefix`0000 ..., shape i mod the number of shapes.
Result<std::vector<NodeSpec>> NumberedNodes(const std::string& prefix, int count, const std::string& cards) {
  Result<std::vector<NodeSpec>> shapes = ParseShapes(cards);
  if (!shapes.ok()) return shapes;
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < count; ++i) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "%04d", i);
    nodes.push_back((*shapes)[static_cast<size_t>(i) % shapes->size()]);
    nodes.back().name = prefix + suffix;
  }
  return nodes;
}

// --node-list: the nodes of a CSV file (the usage at the top says its columns).
Result<std::vector<NodeSpec>> ReadNodeList(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"--node-list: cannot read " + path};
  std::vector<NodeSpec> nodes;
  std::string line;
  std::getline(in, line);  // the header
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream fields(line);
    NodeSpec n;
    std::string rest;
    if (!(fields >> n.name >> n.cpu_milli >> n.memory_mib >> n.cards >> n.model >> n.card_mib) ||
        (fields >> rest) || n.cpu_milli < 1 || n.memory_mib < 1 || n.cards < 1 || n.cards > 64 ||
        n.card_mib < 1)
      return Error{"--node-list: line " + std::to_string(number) + " of " + path +
                   " is not name,cpu_milli,memory_mib,cards,model,card_mib with 1 to 64 cards"};
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return Error{"--node-list: " + path + " lists no node"};
  return nodes;
}

std::vector<Card> CardsOf(const NodeSpec& node) {
  std::vector<Card> cards;
  for (int c = 0; c < node.cards; ++c)
    cards.push_back(Card{c, "GPU-" + node.name + "-" + std::to_string(c), node.model, node.card_mib, true});
  return cards;
}

// The Node a kubelet with mgpu's device plugin would register for this node's cards.
Json NodeObject(const NodeSpec& spec, const Config& config) {
  const std::string& name = spec.name;
  const std::vector<Card> cards = CardsOf(spec);
  const kube::MetadataPatch metadata =
      node::NodeMetadata(cards, config, MGPU_VERSION, UnixNowNs() / 1'000'000'000);
  Json labels = {
      {"kubernetes.io/hostname", name}, {"kubernetes.io/os", "linux"}, {"mgpu.io/api-only", "true"}};
  for (const auto& [key, value] : metadata.labels)
    if (value) labels[key] = *value;
  Json annotations = Json::object();
  for (const auto& [key, value] : metadata.annotations)
    if (value) annotations[key] = *value;
  const ResourceNames names = config.Names();
  Json resources = {{"cpu", std::to_string(spec.cpu_milli) + "m"},
                    {"memory", std::to_string(spec.memory_mib) + "Mi"},
                    {"pods", "110"},
                    {"ephemeral-storage", "1Ti"}};
  for (Resource r : kAllResources) {
    int64_t devices = 0;
    for (const Card& card : cards) devices += dp::DevicesPerCard(card, r, config);
    resources[FullName(r, names)] = std::to_string(devices);
  }
  const std::string now = Rfc3339(UnixNowNs());
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"labels", labels}, {"annotations", annotations}}},
      {"spec", Json::object()},
      {"status",
       {{"capacity", resources},
        {"allocatable", resources},
        {"conditions",
         {{{"type", "Ready"},
           {"status", "True"},
           {"reason", "KubeletReady"},
           {"message", "an API-only node of mgpu-api-nodes"},
           {"lastHeartbeatTime", now},
           {"lastTransitionTime", now}}}},
        {"nodeInfo",
         {{"kubeletVersion", "v0.0.0-api-only"}, {"architecture", "amd64"}, {"operatingSystem", "linux"}}}}}};
}

// "2026-11-26T02:23:41.123456Z", a Lease's MicroTime.
std::string NowMicro() { return Rfc3339(UnixNowNs(), /*micros=*/true); }

class ApiNodes {
 public:
  ApiNodes(kube::Client& client, Config config, std::vector<NodeSpec> specs, int confirm_after_ms,
           int lease_renew_s)
      : client_(client),
        config_(std::move(config)),
        specs_(std::move(specs)),
        nodes_(NamesOf(specs_)),
        confirm_after_(confirm_after_ms),
        lease_renew_(lease_renew_s) {}

  Status CreateNodes() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Json node = NodeObject(specs_[i], config_);
      kube::ApiResult created = client_.Create(kube::kNodes, "", node);
      if (!created.ok() && created.http_status() != 409)
        return Error{"could not create node " + nodes_[i] + ": " + created.message()};
      // A node's status is written through its status subresource (a create may drop it).
      kube::ApiResult status =
          client_.MergePatch(kube::kNodes, "", nodes_[i], {{"status", node["status"]}}, "status");
      if (!status.ok())
        return Error{"could not set the status of node " + nodes_[i] + ": " + status.message()};
      if (!created.ok()) {
        kube::ApiResult meta =
            client_.MergePatch(kube::kNodes, "", nodes_[i], {{"metadata", node["metadata"]}});
        if (!meta.ok()) return Error{"could not update node " + nodes_[i] + ": " + meta.message()};
      }
    }
    return Status{};
  }

  void Start() {
    leases_.Start([this] { RenewLeases(); });
    if (confirm_after_.count() <= 0) return;
    const std::set<std::string> mine(nodes_.begin(), nodes_.end());
    const ResourceNames names = config_.Names();
    kube::InformerOptions options;
    options.resource = kube::kPods;
    options.transform = [](Json& pod) { pod.erase("status"); };
    informer_ = std::make_unique<kube::Informer>(
        client_, options,
        kube::InformerHandlers{[this, mine, names](const Json& pod) { Saw(pod, mine, names); },
                               [this, mine, names](const Json&, const Json& pod) { Saw(pod, mine, names); },
                               [this](const Json& pod) {
                                 std::lock_guard<std::mutex> lock(mu_);
                                 seen_.erase(pod["metadata"].value("uid", ""));
                               }});
    informer_->Start();
    confirmer_.Start([this, names] { Confirm(names); });
  }

  void Stop() {
    if (informer_) informer_->Stop();
    confirmer_.Stop();
    leases_.Stop();
  }

 private:
  static std::vector<std::string> NamesOf(const std::vector<NodeSpec>& specs) {
    std::vector<std::string> names;
    for (const NodeSpec& s : specs) names.push_back(s.name);
    return names;
  }

  void RenewLeases() {
    std::map<std::string, Json> leases;
    bool first = true;
    while (!leases_.stopping()) {
      const auto round = Clock::now();
      for (size_t i = 0; i < nodes_.size(); ++i) {
        const std::string& node = nodes_[i];
        // After the first round (the leases made at once, for readiness), the renewals are spread evenly
        // over the period, as the nodes' kubelets renew each on its own clock: a round of them all at once
        // would load the API server in bursts no real cluster shows.
        if (!first) {
          const auto at = round + std::chrono::milliseconds(lease_renew_) * static_cast<int64_t>(i) /
                                      static_cast<int64_t>(nodes_.size());
          const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now());
          if (wait.count() > 0 && !leases_.SleepFor(wait)) return;
        }
        if (leases_.stopping()) return;
        Json& lease = leases[node];
        if (lease.is_null()) {
          kube::ApiResult got = client_.GetLease("kube-node-lease", node);
          if (got.ok()) lease = got.value();
        }
        if (lease.is_null()) {
          lease = {{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata", {{"name", node}, {"namespace", "kube-node-lease"}}},
                   {"spec", {{"holderIdentity", node}, {"leaseDurationSeconds", 40}}}};
          lease["spec"]["renewTime"] = NowMicro();
          kube::ApiResult created = client_.CreateLease("kube-node-lease", lease);
          lease = created.ok() ? created.value() : Json();
          if (!created.ok()) spdlog::warn("node={} lease not created: {}", node, created.message());
          continue;
        }
        lease["spec"]["renewTime"] = NowMicro();
        kube::ApiResult renewed = client_.UpdateLease("kube-node-lease", lease);
        lease = renewed.ok() ? renewed.value() : Json();
        if (!renewed.ok()) spdlog::warn("node={} lease not renewed: {}", node, renewed.message());
      }
      first = false;
      ReportReadyAgain();
      std::unique_lock<std::mutex> lock(mu_);
      leases_.WaitFor(
          lock, std::chrono::duration_cast<std::chrono::milliseconds>(round + lease_renew_ - Clock::now()));
    }
  }

  // What a kubelet does when the node lifecycle controller marked its node's Ready condition Unknown (a round
  // of lease renewals that came too late on a loaded machine): it posts Ready again. A lease alone never
  // brings a node back, and a NotReady node stays tainted unreachable.
  void ReportReadyAgain() {
    kube::ApiResult nodes = client_.ListNodes({.label_selector = "mgpu.io/api-only=true"});
    if (!nodes.ok()) return;
    const std::set<std::string> mine(nodes_.begin(), nodes_.end());
    for (const Json& n : nodes->value("items", Json::array())) {
      const std::string name = n["metadata"].value("name", "");
      if (!mine.count(name)) continue;
      bool ready = false;
      for (const Json& c : n.value("status", Json::object()).value("conditions", Json::array()))
        ready |= c.value("type", "") == "Ready" && c.value("status", "") == "True";
      if (ready) continue;
      const std::string now = Rfc3339(UnixNowNs());
      const Json condition = {{"type", "Ready"},          {"status", "True"},
                              {"reason", "KubeletReady"}, {"message", "an API-only node of mgpu-api-nodes"},
                              {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
      kube::ApiResult patched = client_.MergePatch(
          kube::kNodes, "", name, {{"status", {{"conditions", Json::array({condition})}}}}, "status");
      if (patched.ok()) {
        spdlog::info("node={} Ready again", name);
      } else {
        spdlog::warn("node={} Ready not reported: {}", name, patched.message());
      }
    }
  }

  void Saw(const Json& pod, const std::set<std::string>& mine, const ResourceNames& names) {
    const std::string node = pod["spec"].value("nodeName", "");
    if (!mine.count(node)) return;
    const Json& annotations = pod["metadata"].value("annotations", Json::object());
    if (!annotations.contains(names.gpu_assignment) || annotations.contains(names.gpu_allocated)) return;
    const std::string key = pod["metadata"].value("namespace", "") + "/" + pod["metadata"].value("name", "");
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(pod["metadata"].value("uid", "")).second) return;
    due_.push_back(
        {Clock::now() + confirm_after_, key, annotations[names.gpu_assignment].get<std::string>()});
    due_changed_.notify_all();
  }

  void Confirm(const ResourceNames& names) {
    while (!confirmer_.stopping()) {
      Due next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (due_.empty()) {
          // Saw wakes it (a wait without `woken` would sleep the second out: most of a pod's second in
          // bench/realcluster_openb.sh until 2026-11-29).
          confirmer_.WaitFor(lock, std::chrono::milliseconds(1000), [this] { return !due_.empty(); });
          continue;
        }
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(due_.front().at - Clock::now());
        if (wait.count() > 0) {
          confirmer_.WaitFor(lock, wait);
          continue;
        }
        next = due_.front();
        due_.pop_front();
      }
      if (next.key.empty()) continue;
      const size_t slash = next.key.find('/');
      kube::MetadataPatch patch;
      patch.annotations[names.gpu_allocated] = next.assignment;
      kube::ApiResult patched =
          client_.PatchPodMetadata(next.key.substr(0, slash), next.key.substr(slash + 1), patch);
      if (!patched.ok() && !patched.IsNotFound())
        spdlog::warn("pod={} gpu-allocated not written: {}", next.key, patched.message());
    }
  }

  struct Due {
    Clock::time_point at{};
    std::string key{};
    std::string assignment{};
  };

  kube::Client& client_;
  const Config config_;
  const std::vector<NodeSpec> specs_;
  const std::vector<std::string> nodes_;
  const std::chrono::milliseconds confirm_after_;
  const std::chrono::seconds lease_renew_;
  std::unique_ptr<kube::Informer> informer_;
  std::mutex mu_;
  std::condition_variable due_changed_;
  BackgroundThread leases_{mu_, due_changed_};
  BackgroundThread confirmer_{mu_, due_changed_};
  // The uids of the pods queued (each is confirmed once; a pod made again under its name is another pod).
  std::set<std::string> seen_;
  std::deque<Due> due_;  // in time order: every entry waits the same delay
};

}  // namespace
}  // namespace mgpu

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv,
                  {"kubeconfig", "nodes", "cards", "node-list", "config", "prefix", "confirm-after-ms",
                   "lease-renew-s"},
                  {}, flags) ||
      flags["nodes"].empty() == flags["node-list"].empty()) {
    std::cerr << "usage: mgpu-api-nodes --kubeconfig FILE (--nodes N [--cards 2x24576[,8x81920,...]] "
                 "[--prefix api-node-] | --node-list FILE) [--config FILE] [--confirm-after-ms MS] "
                 "[--lease-renew-s 20]\n";
    return kExitUsage;
  }
  Result<Config> config = flags["config"].empty() ? ParseConfig("") : LoadConfigFile(flags["config"]);
  if (!config.ok()) {
    std::cerr << "mgpu-api-nodes: " << config.message() << '\n';
    return kExitConfig;
  }
  const int count = std::atoi(flags["nodes"].c_str());
  const int confirm_after_ms =
      flags["confirm-after-ms"].empty() ? 0 : std::atoi(flags["confirm-after-ms"].c_str());
  const int lease_renew_s = flags["lease-renew-s"].empty() ? 20 : std::atoi(flags["lease-renew-s"].c_str());
  if ((flags["node-list"].empty() && (count < 1 || count > 100000)) || confirm_after_ms < 0 ||
      lease_renew_s < 1) {
    std::cerr << "mgpu-api-nodes: --nodes must be 1 to 100000, --confirm-after-ms 0 or more, --lease-renew-s "
                 "1 or more\n";
    return kExitUsage;
  }
  const std::string prefix = flags["prefix"].empty() ? "api-node-" : flags["prefix"];
  Result<std::vector<NodeSpec>> nodes =
      flags["node-list"].empty()
          ? NumberedNodes(prefix, count, flags["cards"].empty() ? "2x24576" : flags["cards"])
          : ReadNodeList(flags["node-list"]);
  if (!nodes.ok()) {
    std::cerr << "mgpu-api-nodes: " << nodes.message() << '\n';
    return kExitUsage;
  }
  Result<kube::ClusterConfig> cluster = kube::ResolveClusterConfig(flags["kubeconfig"]);
  if (!cluster.ok()) {
    std::cerr << "mgpu-api-nodes: " << cluster.message() << '\n';
    return kExitConfig;
  }
  kube::ClientOptions client_options;
  client_options.user_agent = "mgpu-api-nodes";
  auto client = kube::Client::Create(std::move(*cluster), client_options);
  if (!client.ok()) {
    std::cerr << "mgpu-api-nodes: " << client.message() << '\n';
    return kExitConfig;
  }
  const size_t created = nodes->size();
  const std::string first = nodes->front().name;

  TerminationSignals signals;  // before any thread starts
  ApiNodes api_nodes(**client, std::move(*config), std::move(*nodes), confirm_after_ms, lease_renew_s);
  if (Status s = api_nodes.CreateNodes(); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitServe;
  }
  api_nodes.Start();
  spdlog::info(
      "{} API-only nodes ({} ...) created; renewing their leases every {} s{}", created, first, lease_renew_s,
      confirm_after_ms > 0 ? ", confirming assignments " + std::to_string(confirm_after_ms) + " ms late"
                           : "");
  const int signal = signals.Wait();
  spdlog::info("signal {}: stopping", signal);
  api_nodes.Stop();
  return 0;
}
