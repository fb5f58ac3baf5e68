#include "cli/kubectl_mgpu.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/cluster_cache.h"
#include "common/cluster_defrag.h"
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
    "  kubectl mgpu why [NAMESPACE/]POD [-n NAMESPACE] [--extender URL [--extender-ca FILE | "
    "--insecure-skip-tls-verify]]\n"
    "                   [flags]   the extender filter's answer for every node: fits, or why not\n"
    "  kubectl mgpu defrag --dry-run [NAMESPACE/]POD [-n NAMESPACE] [flags]\n"
    "                   for a pod that fragmentation keeps off every node: which offline pods to move\n"
    "                   where so that it fits (a plan only: mgpu moves no pod itself)\n"
    "\n"
    "  -o, --output        table (default) or json (nodes: the extender's /v1/nodes format)\n"
    "  -n, --namespace     pods: only this namespace (default: all); why, defrag: the pod's, unless\n"
    "                      POD is NAMESPACE/NAME as the tables print it (default: the kubeconfig\n"
    "                      context's, else default)\n"
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
  std::vector<std::string> args;  // nodes, or the pod of why and defrag
  std::string output = "table";
  std::string ns;
  std::string pod_namespace, pod_name;  // why, defrag: the pod (Load fills in the kubeconfig's namespace)
  std::string extender;
  std::string extender_ca;
  bool insecure = false;
  bool dry_run = false;
  std::string kubeconfig;
  std::string context;
  std::string config_file;
  std::string domain;
  bool help = false;
};

// The namespace and name of the pod why and defrag are given: NAMESPACE/NAME as mgpu's tables print pods,
// or NAME in `ns` (-n; empty: the kubeconfig context's, as kubectl reads it).
Result<std::pair<std::string, std::string>> PodName(const std::string& arg, const std::string& ns) {
  const size_t slash = arg.find('/');
  if (slash == std::string::npos) return std::pair{ns, arg};
  const std::string prefix = arg.substr(0, slash), name = arg.substr(slash + 1);
  if (prefix.empty() || name.empty() || name.find('/') != std::string::npos)
    return Error{"pod \"" + arg + "\" is neither NAME nor NAMESPACE/NAME"};
  if (!ns.empty() && ns != prefix)
    return Error{"pod " + arg + " is in namespace " + prefix + ", but -n says " + ns};
  return std::pair{prefix, name};
}

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
    if (a == "--dry-run") {
      o.dry_run = true;
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
  if (o.command != "nodes" && o.command != "pods" && o.command != "why" && o.command != "defrag") {
    return Error{o.command.empty() ? "missing command (nodes, pods, why or defrag)"
                                   : "unknown command \"" + o.command + "\""};
  }
  if (o.command == "why" || o.command == "defrag") {
    if (o.args.size() != 1) return Error{o.command + " takes one pod name"};
    Result<std::pair<std::string, std::string>> pod = PodName(o.args.front(), o.ns);
    if (!pod.ok()) return pod.error();
    std::tie(o.pod_namespace, o.pod_name) = std::move(*pod);
  }
  if (o.command == "defrag" && !o.dry_run)
    return Error{"defrag only plans: pass --dry-run (mgpu moves no pod itself)"};
  if (o.command != "defrag" && o.dry_run) return Error{"--dry-run is a flag of defrag"};
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

// The card indexes of `cards` on `node`, comma-separated.
std::string CardList(const NodeState& node, const Assignment& cards) {
  std::string out;
  for (const ContainerAssignment& c : cards.containers) {
    for (const CardShare& share : c.cards) {
      const CardState* card = node.FindCard(share.uuid);
      out += (out.empty() ? "" : ",") + (card ? std::to_string(card->card.index) : share.uuid);
    }
  }
  return out;
}

// The diagnosis of a GPU pod that parsed, with a fresh model that has learned it (as why's filter runs).
Unblocking DiagnosePod(const ClusterView& view, const PodRequest& pod) {
  ModelPublisher model;
  const ModelPublisher::Published published = model.Observe(pod, [&view] { return view.Free(); });
  return Diagnose(view, pod, published.model.get());
}

// The line under why's table when no node fits: could none ever hold the pod, is the free capacity short,
// or is it fragmentation?
std::string WhyNowhere(const ClusterView& view, const Result<PodRequest>& pod, const Verdicts& verdicts) {
  if (!pod.ok() || !pod->AsksForGpu() || !verdicts.fits.empty() || !verdicts.unresolvable.empty()) return "";
  const Unblocking u = DiagnosePod(view, *pod);
  if (u.cause == Unblocking::Cause::kNever || u.cause == Unblocking::Cause::kShort)
    return "\nNo node fits: " + u.sentence + ".\n";
  if (u.cause != Unblocking::Cause::kFragmentation) return "";
  return "\nNo node fits, though the free capacity of the nodes it may use would hold it: fragmentation. " +
         std::string(u.plan ? "kubectl mgpu defrag --dry-run " + pod->Key() +
                                  " shows which offline pods to move to make room.\n"
                            : "No move of offline pods makes room: " + u.sentence + ".\n");
}

// kubectl mgpu defrag --dry-run: the plan, or why there is none.
std::string DefragText(const ClusterView& view, const PodRequest& pod) {
  const std::string who = "pod " + pod.Key();
  if (!pod.AsksForGpu()) return who + " asks for no mgpu resource: there is nothing to plan\n";
  const Unblocking u = DiagnosePod(view, pod);
  switch (u.cause) {
    case Unblocking::Cause::kFits:
      return who + " fits node " + u.nodes[u.plan->node]->state.name + " now: nothing to move\n";
    case Unblocking::Cause::kNever:
    case Unblocking::Cause::kShort:
      return who + " fits no node, and moving pods cannot help: " + u.sentence + "\n";
    case Unblocking::Cause::kFragmentation:
      break;
  }
  const std::string cause = who +
                            " fits no node, though the free capacity of the nodes it may use would hold it "
                            "(fragmentation)";
  if (!u.plan) return cause + "; no plan: " + u.sentence + "\n";
  const NodeState& target = u.nodes[u.plan->node]->state;
  std::vector<std::vector<std::string>> rows = {{"MOVE", "POD", "FROM", "TO", "CARDS"}};
  for (size_t i = 0; i < u.plan->moves.size(); ++i) {
    const DefragMove& m = u.plan->moves[i];
    const NodeState& to = u.nodes[m.to]->state;
    rows.push_back(
        {std::to_string(i + 1), m.pod, u.nodes[m.from]->state.name, to.name, CardList(to, m.cards)});
  }
  return cause + ". Moving these offline pods (dry run: nothing is moved) makes room on node " + target.name +
         ":\n" + FormatTable(rows) + "then " + who + " fits node " + target.name + " on card(s) " +
         CardList(target, u.plan->cards) + "\n";
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

namespace {

// What every command reads: the nodes and pods the API server holds, in the extender's own cache of cards.
struct Cluster {
  Config config;
  std::string server;
  std::unique_ptr<kube::Client> client;
  json nodes;  // the node objects
  std::unique_ptr<kube::WorkloadResolver> workloads;
  std::unique_ptr<ClusterCache> cache;
  std::shared_ptr<const ClusterView> snapshot;
};

// Reads the cluster `options` name into `cluster`: 0, or the exit code once `err` has the sentence. A pod
// given without a namespace gets the kubeconfig context's.
int Load(Options& options, Cluster& cluster, std::ostream& err) {
  Config& config = cluster.config;
  if (!options.config_file.empty()) {
    Result<Config> loaded = LoadConfigFile(options.config_file);
    if (!loaded.ok()) {
      err << "kubectl-mgpu: " << loaded.message() << "\n";
      return kExitConfig;
    }
    config = std::move(*loaded);
  }
  Result<kube::ClusterConfig> resolved = kube::ResolveClusterConfig(options.kubeconfig, options.context);
  if (!resolved.ok()) {
    err << "kubectl-mgpu: " << resolved.message() << "\n";
    return kExitConfig;
  }
  cluster.server = resolved->server;
  if (options.pod_namespace.empty()) options.pod_namespace = resolved->default_namespace;
  kube::ClientOptions client_options;
  client_options.user_agent = "kubectl-mgpu";
  client_options.request_timeout = std::chrono::seconds(30);
  Result<std::unique_ptr<kube::Client>> client = kube::Client::Create(std::move(*resolved), client_options);
  if (!client.ok()) {
    err << "kubectl-mgpu: " << client.message() << "\n";
    return kExitConfig;
  }
  cluster.client = std::move(*client);

  kube::ApiResult nodes = cluster.client->ListNodes();
  if (!nodes.ok()) {
    err << "kubectl-mgpu: cannot list nodes from " << cluster.server << ": " << nodes.message() << "\n";
    return kExitApi;
  }
  cluster.nodes = nodes->value("items", json::array());
  if (!options.domain.empty()) {
    config.resource_domain = options.domain;
  } else if (options.config_file.empty()) {
    Result<std::string> domain = DetectDomain(cluster.nodes);
    if (!domain.ok()) {
      err << "kubectl-mgpu: " << domain.message() << "\n";
      return kExitUsage;
    }
    if (!domain->empty()) config.resource_domain = *domain;
  }
  if (options.config_file.empty())
    config.memory_unit_mib =
        DetectMemoryUnit(cluster.nodes, config.Names().gpu_inventory, config.memory_unit_mib);

  kube::ApiResult pods = cluster.client->ListPods("");
  if (!pods.ok()) {
    err << "kubectl-mgpu: cannot list pods from " << cluster.server << ": " << pods.message() << "\n";
    return kExitApi;
  }
  cluster.workloads = std::make_unique<kube::WorkloadResolver>(cluster.client.get());
  cluster.cache = std::make_unique<ClusterCache>(config);
  for (const json& node : cluster.nodes) cluster.cache->UpsertNode(ReadNode(node, config));
  for (const json& pod : pods->value("items", json::array()))
    cluster.cache->UpsertPod(cluster.workloads->Read(pod, config));
  cluster.snapshot = cluster.cache->Snapshot();
  if (cluster.snapshot->size() == 0) {
    err << "kubectl-mgpu: no node of " << cluster.server << " has a " << config.Names().gpu_inventory
        << " annotation; is mgpu-device-plugin running on the GPU nodes?\n";
    return kExitNoNodes;
  }
  return 0;
}

// The pod why and defrag are given, read from the API server; an error once `err` says why not.
kube::ApiResult GivenPod(const Options& options, const Cluster& cluster, std::ostream& err) {
  kube::ApiResult pod = cluster.client->GetPod(options.pod_namespace, options.pod_name);
  if (!pod.ok())
    err << "kubectl-mgpu: cannot read pod " << PodKey(options.pod_namespace, options.pod_name) << " from "
        << cluster.server << ": " << pod.message() << "\n";
  return pod;
}

// why: the filter's answer for every node, run here over the cluster read or asked of a running extender.
int Why(const Options& options, Cluster& cluster, std::ostream& out, std::ostream& err) {
  kube::ApiResult pod = GivenPod(options, cluster, err);
  if (!pod.ok()) return kExitApi;
  std::vector<std::string> names;
  for (const json& node : cluster.nodes) names.push_back(kube::MetadataString(node, "name"));
  std::sort(names.begin(), names.end());
  const Result<PodRequest> request = cluster.workloads->Read(*pod, cluster.config).request;
  Result<Verdicts> verdicts = Verdicts{};
  if (options.extender.empty()) {
    ModelPublisher model;
    DecisionMemo memo;
    FilterVerdicts result = FilterPod(*cluster.snapshot, names, request, model, memo, cluster.config);
    for (size_t i : result.passed) verdicts->fits.insert(names[i]);
    verdicts->failed = std::move(result.failed);
    verdicts->unresolvable = std::move(result.unresolvable);
  } else {
    verdicts = AskExtender(options, json{{"Pod", *pod}, {"NodeNames", names}, {"Nodes", nullptr}}.dump());
  }
  if (!verdicts.ok() || !verdicts->error.empty()) {
    err << "kubectl-mgpu: "
        << (verdicts.ok() ? "the extender answered: " + verdicts->error : verdicts.message()) << "\n";
    return kExitApi;
  }
  out << WhyTable(names, *verdicts) << WhyNowhere(*cluster.snapshot, request, *verdicts);
  return 0;
}

// kubectl mgpu defrag --dry-run POD: reads the pod and prints DefragText over the cluster read.
int Defrag(const Options& options, Cluster& cluster, std::ostream& out, std::ostream& err) {
  kube::ApiResult pod = GivenPod(options, cluster, err);
  if (!pod.ok()) return kExitApi;
  const Result<PodRequest> request = cluster.workloads->Read(*pod, cluster.config).request;
  out << (request.ok() ? DefragText(*cluster.snapshot, *request)
                       : "pod " + PodKey(options.pod_namespace, options.pod_name) +
                             " fits no node: " + request.message() + "\n");
  return 0;
}

// The nodes pods and nodes show: those named (each must be an mgpu node), else every one.
int Chosen(const Options& options, const Cluster& cluster, std::vector<const NodeView*>& view,
           std::ostream& err) {
  view = cluster.snapshot->Nodes();
  if (options.args.empty()) return 0;
  std::vector<const NodeView*> chosen;
  for (const std::string& name : options.args) {
    const NodeView* node = cluster.snapshot->Find(name);
    if (!node) {
      err << "kubectl-mgpu: node " << name << " has no " << cluster.config.Names().gpu_inventory
          << " annotation (not an mgpu node, or no such node)\n";
      return kExitNoNodes;
    }
    chosen.push_back(node);
  }
  std::sort(chosen.begin(), chosen.end(),
            [](const NodeView* a, const NodeView* b) { return a->state.name < b->state.name; });
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  view = std::move(chosen);
  return 0;
}

int Pods(const Options& options, const Cluster& cluster, std::ostream& out, std::ostream& err) {
  std::vector<const NodeView*> view;
  if (int code = Chosen(options, cluster, view, err)) return code;
  if (options.output == "json")
    out << PodsJson(view, options.ns).dump(2) << "\n";
  else
    out << PodsTable(view, options.ns);
  return 0;
}

int Nodes(const Options& options, const Cluster& cluster, std::ostream& out, std::ostream& err) {
  std::vector<const NodeView*> view;
  if (int code = Chosen(options, cluster, view, err)) return code;
  if (options.output == "json")
    out << NodesJson(view).dump(2) << "\n";
  else
    out << NodesTable(view);
  return 0;
}

}  // namespace

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
  Cluster cluster;
  if (int code = Load(*options, cluster, err)) return code;
  if (options->command == "defrag") return Defrag(*options, cluster, out, err);
  if (options->command == "why") return Why(*options, cluster, out, err);
  if (options->command == "pods") return Pods(*options, cluster, out, err);
  return Nodes(*options, cluster, out, err);
}

}  // namespace mgpu::cli
