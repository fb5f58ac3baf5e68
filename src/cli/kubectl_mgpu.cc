#include "cli/kubectl_mgpu.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <string_view>

#include "common/cluster_cache.h"
#include "common/codec.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/decision_memo.h"
#include "common/filter.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/kube/workload.h"
#include "common/node_facts.h"
#include "common/nodes_json.h"
#include "common/request.h"
#include "common/scheduler.h"
#include "common/text_table.h"

namespace mgpu::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kUsage =
    "Shows how mgpu's GPU cards are shared, as the scheduler extender sees them.\n"
    "\n"
    "Usage:\n"
    "  kubectl mgpu nodes [NODE...] [-o table|json] [flags]   per node and card: allocation and pods\n"
    "  kubectl mgpu pods [NODE...] [-n NAMESPACE] [-o table|json] [flags]\n"
    "                    which pod holds which slice of which card, and its GPU share (for billing)\n"
    "  kubectl mgpu why POD [-n NAMESPACE] [--extender URL [--extender-ca FILE | "
    "--insecure-skip-tls-verify]]\n"
    "                   [flags]   the extender filter's answer for every node: fits, or why not\n"
    "\n"
    "  -o, --output        table (default) or json (nodes: the extender's /v1/nodes format)\n"
    "  -n, --namespace     pods: only this namespace (default: all); why: the pod's (default: default)\n"
    "  --extender          why: ask this running extender's /filter (its live cache), e.g. after\n"
    "                      kubectl -n mgpu-system port-forward svc/mgpu-scheduler-extender 12345;\n"
    "                      default: run the extender's filter here over what the API server holds\n"
    "  --extender-ca       why: the CA of the extender's certificate (scripts/certs.sh's ca.crt)\n"
    "  --insecure-skip-tls-verify  why: do not check the extender's certificate\n"
    "  --kubeconfig        kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
    "  --context           kubeconfig context (default: the current one)\n"
    "  --config            the mgpu config file, for its resourceDomain, memoryUnitMiB and\n"
    "                      extender.assignmentTTLSeconds (default: taken from the nodes' inventories)\n"
    "  --resource-domain   the resource domain D (default: the one the nodes' D/gpu-inventory use)\n"
    "\n"
    "Exit codes: 0 shown, 1 API server unreadable, 2 usage, 3 bad kubeconfig or config, 4 no mgpu node.\n";

struct Options {
  std::string command;
  std::vector<std::string> args;  // nodes, or the pod of why
  std::string output = "table";
  std::string ns;
  std::string extender;
  std::string extender_ca;
  bool insecure = false;
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
      {"-n", &Options::ns},
      {"--namespace", &Options::ns},
      {"--extender", &Options::extender},
      {"--extender-ca", &Options::extender_ca},
  };
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help" || a == "help") {
      o.help = true;
      continue;
    }
    if (a == "--insecure-skip-tls-verify") {
      o.insecure = true;
      continue;
    }
    if (a.empty() || a[0] != '-') {
      if (o.command.empty())
        o.command = a;
      else
        o.args.push_back(a);
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
  if (o.command != "nodes" && o.command != "pods" && o.command != "why") {
    return Error{o.command.empty() ? "missing command (nodes, pods or why)"
                                   : "unknown command \"" + o.command + "\""};
  }
  if (o.command == "why" && o.args.size() != 1) return Error{"why takes one pod name"};
  if (o.command != "why" && (!o.extender.empty() || !o.extender_ca.empty() || o.insecure))
    return Error{"--extender, --extender-ca and --insecure-skip-tls-verify are flags of why"};
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

std::string Share(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", share);
  return text;
}

// The pods holding cards on `nodes` (of namespace `ns`, or all when empty), sorted by namespace/name.
std::vector<std::pair<const NodeView*, const PlacedPod*>> PodsOn(const std::vector<const NodeView*>& nodes,
                                                                 const std::string& ns) {
  std::vector<std::pair<const NodeView*, const PlacedPod*>> pods;
  for (const NodeView* node : nodes)
    for (const PlacedPod& pod : node->pods)
      if (ns.empty() || pod.key.rfind(ns + "/", 0) == 0) pods.emplace_back(node, &pod);
  std::sort(pods.begin(), pods.end(),
            [](const auto& a, const auto& b) { return a.second->key < b.second->key; });
  return pods;
}

std::string PodsTable(const std::vector<const NodeView*>& nodes, const std::string& ns) {
  std::vector<std::vector<std::string>> rows = {
      {"POD", "NODE", "STATE", "SHARE", "CONTAINER", "CARD", "CORE", "RECLAIMED", "MEMORY(MiB)"}};
  for (const auto& [node, pod] : PodsOn(nodes, ns)) {
    const std::string state = pod->allocated ? "allocated" : "assigned";
    for (const ContainerAssignment& container : pod->assignment.containers) {
      for (const CardShare& piece : container.cards) {
        const CardState* card = node->state.FindCard(piece.uuid);
        rows.push_back({pod->key, node->state.name, state, Share(PodGpuShare(*node, *pod)),
                        container.container, card ? std::to_string(card->card.index) : piece.uuid,
                        std::to_string(piece.core), std::to_string(piece.reclaimed_core),
                        std::to_string(piece.memory_mib)});
      }
    }
  }
  return FormatTable(rows);
}

json PodsJson(const std::vector<const NodeView*>& nodes, const std::string& ns) {
  json pods = json::array();
  for (const auto& [node, pod] : PodsOn(nodes, ns)) {
    json containers = json::array();
    for (const ContainerAssignment& container : pod->assignment.containers) {
      json cards = json::array();
      for (const CardShare& piece : container.cards) {
        const CardState* card = node->state.FindCard(piece.uuid);
        cards.push_back({{"index", card ? json(card->card.index) : json(nullptr)},
                         {"uuid", piece.uuid},
                         {"core", piece.core},
                         {"reclaimedCore", piece.reclaimed_core},
                         {"memoryMiB", piece.memory_mib}});
      }
      containers.push_back({{"name", container.container}, {"cards", cards}});
    }
    pods.push_back({{"pod", pod->key},
                    {"uid", pod->uid},
                    {"node", node->state.name},
                    {"allocated", pod->allocated},
                    {"share", PodGpuShare(*node, *pod)},
                    {"containers", containers}});
  }
  return {{"pods", pods}};
}

// The filter's answer for every node, as kube-scheduler reads it.
struct Verdicts {
  std::set<std::string> fits;
  std::map<std::string, std::string> failed, unresolvable;
  std::string error;
};

// POSTs `args` to a running extender's /filter.
Result<Verdicts> AskExtender(const Options& options, const std::string& body) {
  httplib::Client http(options.extender);
  if (!http.is_valid()) return Error{"--extender " + options.extender + " is not a scheme://host:port URL"};
  if (!options.extender_ca.empty()) http.set_ca_cert_path(options.extender_ca.c_str());
  if (options.insecure) http.enable_server_certificate_verification(false);
  http.set_read_timeout(std::chrono::seconds(30));
  httplib::Result res = http.Post("/filter", body, "application/json");
  if (!res)
    return Error{"cannot reach the extender at " + options.extender + ": " + httplib::to_string(res.error())};
  const json reply = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !reply.is_object())
    return Error{"the extender at " + options.extender + " answered HTTP " + std::to_string(res->status)};
  Verdicts v;
  for (const json& name : reply.value("NodeNames", json::array()))
    if (name.is_string()) v.fits.insert(name.get<std::string>());
  for (const auto& [key, map] :
       {std::pair{"FailedNodes", &v.failed}, {"FailedAndUnresolvableNodes", &v.unresolvable}}) {
    const json reasons = reply.value(key, json::object());
    for (const auto& [node, reason] : reasons.items())
      if (reason.is_string()) (*map)[node] = reason.get<std::string>();
  }
  if (reply.value("Error", json()).is_string()) v.error = reply["Error"];
  return v;
}

std::string WhyTable(const std::vector<std::string>& nodes, const Verdicts& v) {
  std::vector<std::vector<std::string>> rows = {{"NODE", "RESULT", "REASON"}};
  for (const std::string& node : nodes) {
    if (v.fits.count(node)) {
      rows.push_back({node, "fits", "-"});
    } else if (auto it = v.unresolvable.find(node); it != v.unresolvable.end()) {
      rows.push_back({node, "cannot fit", it->second});
    } else if (auto f = v.failed.find(node); f != v.failed.end()) {
      rows.push_back({node, "does not fit", f->second});
    } else {
      rows.push_back({node, "does not fit", "the extender gave no reason"});
    }
  }
  return FormatTable(rows);
}

}  // namespace

std::string NodesTable(const std::vector<const NodeView*>& nodes) {
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "CARD", "MODEL", "HEALTH", "CORE", "RECLAIMED", "MEMORY(MiB)", "PODS"}};
  for (const NodeView* node : nodes) {
    const std::string& name = node->state.name;
    if (!node->problem.empty()) {
      rows.push_back({name, "-", "-", "-", "-", "-", "-", node->problem});
      continue;
    }
    for (const CardState& card : node->state.cards) {
      std::string pods;
      for (const PlacedPod& pod : node->pods) {
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
  ClusterCache cache(config);
  for (const json& node : node_items) cache.UpsertNode(ReadNode(node, config));
  for (const json& pod : pods->value("items", json::array())) cache.UpsertPod(workloads.Read(pod, config));
  const std::shared_ptr<const ClusterView> snapshot = cache.Snapshot();
  std::vector<const NodeView*> view = snapshot->Nodes();
  if (view.empty()) {
    err << "kubectl-mgpu: no node of " << server << " has a " << config.Names().gpu_inventory
        << " annotation; is mgpu-device-plugin running on the GPU nodes?\n";
    return kExitNoNodes;
  }
  if (options->command == "why") {
    const std::string ns = options->ns.empty() ? "default" : options->ns;
    const std::string& name = options->args.front();
    kube::ApiResult pod = (*client)->GetPod(ns, name);
    if (!pod.ok()) {
      err << "kubectl-mgpu: cannot read pod " << ns << "/" << name << " from " << server << ": "
          << pod.message() << "\n";
      return kExitApi;
    }
    std::vector<std::string> names;
    for (const json& node : node_items) names.push_back(kube::MetadataString(node, "name"));
    std::sort(names.begin(), names.end());
    Result<Verdicts> verdicts = Verdicts{};
    if (options->extender.empty()) {
      ModelPublisher model;
      DecisionMemo memo;
      FilterVerdicts result =
          FilterPod(*snapshot, names, workloads.Read(*pod, config).request, model, memo, config);
      for (size_t i : result.passed) verdicts->fits.insert(names[i]);
      verdicts->failed = std::move(result.failed);
      verdicts->unresolvable = std::move(result.unresolvable);
    } else {
      verdicts = AskExtender(*options, json{{"Pod", *pod}, {"NodeNames", names}, {"Nodes", nullptr}}.dump());
    }
    if (!verdicts.ok() || !verdicts->error.empty()) {
      err << "kubectl-mgpu: "
          << (verdicts.ok() ? "the extender answered: " + verdicts->error : verdicts.message()) << "\n";
      return kExitApi;
    }
    out << WhyTable(names, *verdicts);
    return 0;
  }
  if (!options->args.empty()) {
    std::vector<const NodeView*> chosen;
    for (const std::string& name : options->args) {
      const NodeView* node = snapshot->Find(name);
      if (!node) {
        err << "kubectl-mgpu: node " << name << " has no " << config.Names().gpu_inventory
            << " annotation (not an mgpu node, or no such node)\n";
        return kExitNoNodes;
      }
      chosen.push_back(node);
    }
    std::sort(chosen.begin(), chosen.end(),
              [](const NodeView* a, const NodeView* b) { return a->state.name < b->state.name; });
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    view = std::move(chosen);
  }
  if (options->command == "pods") {
    if (options->output == "json")
      out << PodsJson(view, options->ns).dump(2) << "\n";
    else
      out << PodsTable(view, options->ns);
    return 0;
  }
  if (options->output == "json")
    out << NodesJson(view).dump(2) << "\n";
  else
    out << NodesTable(view);
  return 0;
}

}  // namespace mgpu::cli
