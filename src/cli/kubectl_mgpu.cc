#include "cli/kubectl_mgpu.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <string_view>

#include "common/codec.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/text_table.h"
#include "extender/server.h"
#include "common/kube/workload.h"

namespace mgpu::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kUsage =
    "Shows how mgpu's GPU cards are shared, per node and card, as the scheduler extender sees them.\n"
    "\n"
    "Usage:\n"
    "  kubectl mgpu nodes [NODE...] [-o table|json] [--kubeconfig FILE] [--context NAME]\n"
    "                     [--config FILE] [--resource-domain D]\n"
    "\n"
    "  -o, --output        table (default) or json (the extender's /v1/nodes format)\n"
    "  --kubeconfig        kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
    "  --context           kubeconfig context (default: the current one)\n"
    "  --config            the mgpu config file, for its resourceDomain, memoryUnitMiB and\n"
    "                      extender.assignmentTTLSeconds (default: taken from the nodes' inventories)\n"
    "  --resource-domain   the resource domain D (default: the one the nodes' D/gpu-inventory use)\n"
    "\n"
    "Exit codes: 0 shown, 1 API server unreadable, 2 usage, 3 bad kubeconfig or config, 4 no mgpu node.\n";

struct Options {
  std::string command;
  std::vector<std::string> nodes;
  std::string output = "table";
  std::string kubeconfig;
  std::string context;
  std::string config_file;
  std::string domain;
  bool help = false;
};

Result<Options> ParseArgs(const std::vector<std::string>& args) {
  static const std::map<std::string, std::string Options::*, std::less<>> kValued = {
      {"-o", &Options::output},
      {"--output", &Options::output},
      {"--kubeconfig", &Options::kubeconfig},
      {"--context", &Options::context},
      {"--config", &Options::config_file},
      {"--resource-domain", &Options::domain},
  };
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help" || a == "help") {
      o.help = true;
      continue;
    }
    if (a.empty() || a[0] != '-') {
      if (o.command.empty())
        o.command = a;
      else
        o.nodes.push_back(a);
      continue;
    }
    // --flag value, --flag=value, -o value, -ojson
    std::string name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    } else if (a.size() > 2 && a[1] != '-') {
      name = a.substr(0, 2);
      value = a.substr(2);
      inline_value = true;
    }
    auto flag = kValued.find(name);
    if (flag == kValued.end()) return Error{"unknown flag " + name};
    if (!inline_value) {
      if (i + 1 >= args.size()) return Error{"flag " + name + " needs a value"};
      value = args[++i];
    }
    o.*(flag->second) = value;
  }
  if (o.help) return o;
  if (o.command != "nodes") {
    return Error{o.command.empty() ? "missing command (nodes)" : "unknown command \"" + o.command + "\""};
  }
  if (o.output != "table" && o.output != "json") {
    return Error{"unknown output format \"" + o.output + "\" (table or json)"};
  }
  return o;
}

// The domain D of the nodes' D/gpu-inventory annotations; empty when no node has one, an error when they use
// several.
Result<std::string> DetectDomain(const json& nodes) {
  constexpr std::string_view kSuffix = "/gpu-inventory";
  std::set<std::string> domains;
  for (const json& node : nodes) {
    for (const auto& [key, value] : AnnotationsOf(node)) {
      if (key.size() > kSuffix.size() && key.ends_with(kSuffix))
        domains.insert(key.substr(0, key.size() - kSuffix.size()));
    }
  }
  if (domains.size() > 1) {
    std::string list;
    for (const std::string& d : domains) list += (list.empty() ? "" : ", ") + d;
    return Error{"nodes publish inventories under several resource domains (" + list +
                 "); choose one with --resource-domain"};
  }
  return domains.empty() ? std::string() : *domains.begin();
}

// The memoryUnitMiB the nodes' inventories record (the first readable one; the cache reports any node that
// disagrees, as the extender would), or `fallback`.
int64_t DetectMemoryUnit(const json& nodes, const std::string& inventory_key, int64_t fallback) {
  for (const json& node : nodes) {
    const Annotations annotations = AnnotationsOf(node);
    auto it = annotations.find(inventory_key);
    if (it == annotations.end()) continue;
    if (Result<NodeInventory> inventory = DecodeInventory(it->second); inventory.ok())
      return inventory->memory_unit_mib;
  }
  return fallback;
}

std::string Fraction(int64_t used, int64_t total) {
  return std::to_string(used) + "/" + std::to_string(total);
}

}  // namespace

std::string NodesTable(const std::vector<const extender::NodeView*>& nodes) {
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "CARD", "MODEL", "HEALTH", "CORE", "RECLAIMED", "MEMORY(MiB)", "PODS"}};
  for (const extender::NodeView* node : nodes) {
    const std::string& name = node->state.name;
    if (!node->problem.empty()) {
      rows.push_back({name, "-", "-", "-", "-", "-", "-", node->problem});
      continue;
    }
    for (const CardState& card : node->state.cards) {
      std::string pods;
      for (const extender::PlacedPod& pod : node->pods) {
        bool on_card = false;
        for (const ContainerAssignment& container : pod.assignment.containers) {
          for (const CardShare& share : container.cards) on_card |= share.uuid == card.card.uuid;
        }
        if (!on_card) continue;
        pods += (pods.empty() ? "" : ",") + pod.key + (pod.allocated ? "" : "(assigned)");
      }
      rows.push_back({name, std::to_string(card.card.index), card.card.model,
                      card.card.healthy ? "Healthy" : "Unhealthy", Fraction(card.usage.core, 100),
                      Fraction(card.usage.reclaimed_core, 100),
                      Fraction(card.usage.memory_mib, card.capacity_mib), pods.empty() ? "-" : pods});
    }
  }
  return FormatTable(rows);
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Result<Options> options = ParseArgs(args);
  if (!options.ok()) {
    err << "kubectl-mgpu: " << options.message() << "\n\n" << kUsage;
    return kExitUsage;
  }
  if (options->help) {
    out << kUsage;
    return 0;
  }
  Config config;
  if (!options->config_file.empty()) {
    Result<Config> loaded = LoadConfigFile(options->config_file);
    if (!loaded.ok()) {
      err << "kubectl-mgpu: " << loaded.message() << "\n";
      return kExitConfig;
    }
    config = std::move(*loaded);
  }
  Result<kube::ClusterConfig> cluster = kube::ResolveClusterConfig(options->kubeconfig, options->context);
  if (!cluster.ok()) {
    err << "kubectl-mgpu: " << cluster.message() << "\n";
    return kExitConfig;
  }
  const std::string server = cluster->server;
  kube::ClientOptions client_options;
  client_options.user_agent = "kubectl-mgpu";
  client_options.request_timeout = std::chrono::seconds(30);
  Result<std::unique_ptr<kube::Client>> client = kube::Client::Create(std::move(*cluster), client_options);
  if (!client.ok()) {
    err << "kubectl-mgpu: " << client.message() << "\n";
    return kExitConfig;
  }

  kube::ApiResult nodes = (*client)->ListNodes();
  if (!nodes.ok()) {
    err << "kubectl-mgpu: cannot list nodes from " << server << ": " << nodes.message() << "\n";
    return kExitApi;
  }
  const json& node_items = nodes->value("items", json::array());
  if (!options->domain.empty()) {
    config.resource_domain = options->domain;
  } else if (options->config_file.empty()) {
    Result<std::string> domain = DetectDomain(node_items);
    if (!domain.ok()) {
      err << "kubectl-mgpu: " << domain.message() << "\n";
      return kExitUsage;
    }
    if (!domain->empty()) config.resource_domain = *domain;
  }
  if (options->config_file.empty())
    config.memory_unit_mib =
        DetectMemoryUnit(node_items, config.Names().gpu_inventory, config.memory_unit_mib);

  kube::ApiResult pods = (*client)->ListPods("");
  if (!pods.ok()) {
    err << "kubectl-mgpu: cannot list pods from " << server << ": " << pods.message() << "\n";
    return kExitApi;
  }

  kube::WorkloadResolver workloads(client->get());
  extender::ClusterCache cache(config, [&workloads](const json& pod) { return workloads.Resolve(pod); });
  for (const json& node : node_items) cache.UpsertNode(node);
  for (const json& pod : pods->value("items", json::array())) cache.UpsertPod(pod);
  const std::shared_ptr<const extender::ClusterView> snapshot = cache.Snapshot();
  std::vector<const extender::NodeView*> view = snapshot->Nodes();
  if (view.empty()) {
    err << "kubectl-mgpu: no node of " << server << " has a " << config.Names().gpu_inventory
        << " annotation; is mgpu-device-plugin running on the GPU nodes?\n";
    return kExitNoNodes;
  }
  if (!options->nodes.empty()) {
    std::vector<const extender::NodeView*> chosen;
    for (const std::string& name : options->nodes) {
      const extender::NodeView* node = snapshot->Find(name);
      if (!node) {
        err << "kubectl-mgpu: node " << name << " has no " << config.Names().gpu_inventory
            << " annotation (not an mgpu node, or no such node)\n";
        return kExitNoNodes;
      }
      chosen.push_back(node);
    }
    std::sort(chosen.begin(), chosen.end(), [](const extender::NodeView* a, const extender::NodeView* b) {
      return a->state.name < b->state.name;
    });
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    view = std::move(chosen);
  }
  if (options->output == "json")
    out << extender::NodesJson(view).dump(2) << "\n";
  else
    out << NodesTable(view);
  return 0;
}

}  // namespace mgpu::cli
