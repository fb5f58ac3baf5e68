// Replays the openb production trace (bench/traces/openb/README.md) onto an empty simulated cluster and
// reports the GPU capacity each placement policy leaves unallocated, the pods it turned away by kind
// (CPU-only, sharing, one whole GPU, multi-GPU) and the CPU those pods asked for, beside an offline reference
// (PackOffline: the same pods known in advance).
//
// Protocol (the FGD paper's): sort the pod list by name, shuffle with the seed, inflate by sampling with
// replacement until arrivals would pass 130 % of the cluster's GPUs, submit one by one, no departures.
// Node feasibility: GPU model allowed by gpu_spec (a node selector), CPU and memory fit (kube-scheduler's
// resource fit), and the GPU part through mgpu's own allocator (ChooseCards). One card = 100 mgpu-core, so
// gpu_milli is rounded to the nearest percent.
//
// mgpu-as-shipped is what mgpu ships (deploy/extender/scheduler-config.yaml, or --scheduler-config FILE):
// kube-scheduler, as that file configures it (bench/kube_scheduler_model.h), looks for its sample of feasible
// nodes from a start index that rotates from pod to pod; a pod asking for one of the extender's
// managedResources goes to the node the extender's `choose` takes among that sample (the mgpu-fragmentation
// cycle below, over the sample only), any other pod to the node kube-scheduler's own scores put first, and
// the extender's model never sees it. mgpu-fragmentation is the reference "if every pod went through the
// extender, over every feasible node".
//
// Policies: Random, BestFit and Packing are the paper's baselines, re-implemented in this harness from its
// description; binpack, spread and fragmentation run the extender's own placement core (common/scheduler.h):
// the workload model learned pod by pod and published every 16 pods as the extender publishes it, each node
// decided (Decide: fit and PlacementCost) and ranked into extender scores (Scores), the cards chosen and
// applied (Assign). As in kube-scheduler, equal top scores are broken at random. Card choice inside the node
// is mgpu's binpack (best fit), also the paper's default, except under the fragmentation policy.
//
// DRA mode (docs/dra.md, issue 29): kube-scheduler's own allocator picks the card, by first fit over the
// devices in the order the node's driver lists them; the node is still chosen by mgpu's prioritize (the
// extender scoring the nodes as under mgpu-fragmentation). dra-firstfit lists the cards by index, as mgpu's
// driver does; dra-fullest-first lists them fullest first (the order a driver could keep by publishing its
// slices again after every change), so that first fit behaves like best fit. Node feasibility is the same as
// mgpu's: the devices' capacities and sharing counter keep the same per-card rules.
//
// Offline is no policy: the pods that have arrived at the 100 % mark (and all of them, for 130 %) are
// packed at once. Offline-arrival packs them the same way but in arrival order: what knowing the whole list
// buys without choosing the order.
//
//   build/bench/mgpu_trace_replay [--traces default,gpushare40] [--policies bestfit,dra-firstfit,offline]
//                                 [--seeds 10]
//                                 [--first-seed 42] [--trace-dir DIR] [--threads 2] [--limit N]
//                                 [--scheduler-config deploy/extender/scheduler-config.yaml]
//                                 [--gpu-profile NAME]
// --gpu-profile: GPU pods go to the configuration's profile of that schedulerName (as the webhook sends DRA
// pods to dra.schedulerName's) and the as-shipped policy samples their nodes by its percentageOfNodesToScore.
// With --limit, each seed's unallocated GPU % and failed pods by kind at the end of the prefix are printed
// too (to set beside a real scheduler's run of the same prefix, bench/realcluster_openb.sh).
//   build/bench/mgpu_trace_replay --export DIR [--traces default] [--seeds 1] [--first-seed 42] [--limit N]
//
// --export replays nothing: it writes the cluster and each seed's arrivals as the replay makes them, for
// placing the same pods on a real cluster (bench/realcluster_openb.sh). DIR/nodes.csv: one line per node,
// name,cpu_milli,memory_mib,cards,model,card_mib (mgpu-api-nodes --node-list reads it); DIR/TRACE-SEED.csv:
// one line per arriving pod, in order, index,trace_pod,kind,cpu_milli,memory_mib,cards,core,models (kind cpu,
// share, one or multi; core the mgpu-core the pod asks over all its cards, as the replay rounds gpu_milli;
// models |-separated, empty for any).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/kube_scheduler_model.h"
#include "common/allocator.h"
#include "common/defrag.h"
#include "common/scheduler.h"

namespace mgpu::bench {
namespace {

constexpr int kThresholds = 27;  // arrivals 0, 5, ..., 130 % of cluster GPUs

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

struct TraceNode {
  std::string name;
  int64_t cpu_milli, memory_mib;
  int gpus;
  std::string model;
};

struct TracePod {
  std::string name;
  int64_t cpu_milli, memory_mib;
  int num_gpu;
  int gpu_milli;
  std::vector<std::string> models;     // allowed; empty = any
  bool best_effort = false;            // qos BE
  int64_t created = -1, deleted = -1;  // creation_time and deletion_time (s); -1 where the list has none
};

// Per-card memory by model, for realism only: the paper's experiment does not constrain GPU memory.
int64_t ModelMemoryMiB(const std::string& model) {
  static const std::map<std::string, int64_t> kMiB = {{"P100", 16280},    {"T4", 15109},  {"V100M16", 16160},
                                                      {"V100M32", 32510}, {"A10", 22731}, {"A100", 81251}};
  auto it = kMiB.find(model);
  return it == kMiB.end() ? 32768 : it->second;
}

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    std::exit(1);
  }
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) rows.push_back(Split(line, ','));
  }
  return rows;
}

std::vector<TraceNode> LoadNodes(const std::string& dir) {
  std::vector<TraceNode> nodes;
  for (const auto& r : ReadCsv(dir + "/openb_node_list_gpu_node.csv")) {
    nodes.push_back({r[0], std::stoll(r[1]), std::stoll(r[2]), std::stoi(r[3]), r[4]});
  }
  return nodes;
}

std::vector<TracePod> LoadPods(const std::string& path) {
  std::vector<TracePod> pods;
  for (const auto& r : ReadCsv(path)) {
    TracePod p{r[0], std::stoll(r[1]), std::stoll(r[2]), std::stoi(r[3]), std::stoi(r[4]), {}};
    if (r.size() > 5 && !r[5].empty()) p.models = Split(r[5], '|');
    if (r.size() > 6) p.best_effort = r[6] == "BE";
    if (r.size() > 9 && !r[8].empty() && !r[9].empty())
      p.created = std::stoll(r[8]), p.deleted = std::stoll(r[9]);
    pods.push_back(std::move(p));
  }
  std::sort(pods.begin(), pods.end(), [](const TracePod& a, const TracePod& b) { return a.name < b.name; });
  return pods;
}

enum class Policy {
  kRandom,
  kBestFit,
  kPacking,
  kBinpack,
  kSpread,
  kFragmentation,
  kDraFirstFit,
  kDraFullestFirst,
  kDraKube,
  kOffline,
  kOfflineArrival,
  kDefrag,  // --departures only: mgpu-fragmentation, carrying out defragmentation plans
  kAsShipped
};
const std::vector<std::pair<Policy, std::string>> kPolicies = {
    {Policy::kAsShipped, "mgpu-as-shipped"},
    {Policy::kRandom, "Random"},
    {Policy::kBestFit, "BestFit"},
    {Policy::kPacking, "Packing"},
    {Policy::kBinpack, "mgpu-binpack"},
    {Policy::kSpread, "mgpu-spread"},
    {Policy::kFragmentation, "mgpu-fragmentation"},
    {Policy::kDraFirstFit, "dra-firstfit"},
    {Policy::kDraFullestFirst, "dra-fullest-first"},
    {Policy::kDraKube, "dra-kube"},
    {Policy::kOffline, "Offline"},
    {Policy::kOfflineArrival, "Offline-arrival"},
    {Policy::kDefrag, "mgpu-defrag"}};

// Pod kinds for the failure breakdown.
enum Kind { kCpuOnly, kShare, kOneGpu, kMultiGpu, kKinds };

Kind KindOf(const TracePod& p) {
  if (p.num_gpu == 0) return kCpuOnly;
  if (p.num_gpu == 1 && p.gpu_milli < 1000) return kShare;
  return p.num_gpu == 1 ? kOneGpu : kMultiGpu;
}

// Lists the replay makes for mixes the nine published lists do not cover, the way the published variants were
// made from the default list (bench/traces/openb/README.md, "Generated lists"):
//  - gen-cpuNNN: default's GPU pods, and CPU-only pods drawn with replacement from default's CPU-only pods
//    until they are NN.N % of all pods (cpu100 and cpu200 are made so: their GPU pods are default's, their
//    CPU-only pods default's drawn again).
//  - gen-gpuspecNN: default's pods, NN % of the GPU pods (drawn without replacement) pinned to GPU models:
//    each takes the gpu_spec of a pod drawn from gpuspec20's pinned pods of its kind (sharing, one whole
//    card, several cards). On the published lists the models follow the kind (sharing pods are pinned to T4
//    and P100 only), and drawing by kind keeps that.
// `seed` chooses the list; the replay's seeds then shuffle and inflate it as any other. Exits on a name it
// does not know.
std::vector<TracePod> GenerateList(const std::string& dir, const std::string& name, uint32_t seed) {
  const auto percent = [&](const std::string& prefix, double scale) {
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
      return -1.0;
    }
    const double value = std::stod(name.substr(prefix.size())) / scale;
    return value < 100 ? value : -1.0;
  };
  const std::vector<TracePod> base = LoadPods(dir + "/openb_pod_list_default.csv");
  std::mt19937_64 rng(seed);
  std::vector<TracePod> gpu, cpu;
  for (const TracePod& p : base) (p.num_gpu > 0 ? gpu : cpu).push_back(p);
  std::vector<TracePod> out;
  if (const double share = percent("gen-cpu", 10); share >= 0) {
    out = gpu;
    const auto want =
        static_cast<size_t>(std::lround(share / (100 - share) * static_cast<double>(gpu.size())));
    for (size_t i = 0; i < want; ++i) {
      TracePod p = cpu[std::uniform_int_distribution<size_t>(0, cpu.size() - 1)(rng)];
      char id[32];
      std::snprintf(id, sizeof id, "openb-gen-cpu-%05d", static_cast<int>(i));
      p.name = id;
      out.push_back(std::move(p));
    }
  } else if (const double pinned = percent("gen-gpuspec", 1); pinned >= 0) {
    std::vector<std::vector<std::string>> specs[kKinds];
    for (const TracePod& p : LoadPods(dir + "/openb_pod_list_gpuspec20.csv"))
      if (!p.models.empty()) specs[KindOf(p)].push_back(p.models);
    std::vector<size_t> order(gpu.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const auto want = static_cast<size_t>(std::lround(pinned / 100 * static_cast<double>(gpu.size())));
    for (size_t k = 0; k < want; ++k) {
      TracePod& p = gpu[order[k]];
      const std::vector<std::vector<std::string>>& from = specs[KindOf(p)];
      p.models = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    }
    out = std::move(gpu);
    out.insert(out.end(), cpu.begin(), cpu.end());
  } else {
    std::cerr << "unknown generated list " << name << " (gen-cpuNNN: NN.N percent of the pods CPU-only; "
              << "gen-gpuspecNN: NN percent of the GPU pods pinned to models)\n";
    std::exit(2);
  }
  std::sort(out.begin(), out.end(), [](const TracePod& a, const TracePod& b) { return a.name < b.name; });
  return out;
}

struct SimNode {
  const TraceNode* trace;
  NodeState gpu;
  int64_t cpu_left, memory_left;
  // Pods without a cpu or a memory request (kube-scheduler's NonZeroRequested counts them at its defaults).
  int zero_cpu_pods = 0, zero_memory_pods = 0;
};

// The mgpu request a trace pod stands for; GPU memory is not constrained (0 MiB).
PodRequest RequestOf(const TracePod& p) {
  PodRequest r;
  r.namespace_name = "openb";
  r.name = p.name;
  r.cpu_milli = p.cpu_milli;
  r.host_memory_mib = p.memory_mib;
  r.gpu_models = p.models;
  std::sort(r.gpu_models.begin(), r.gpu_models.end());
  r.gpu_models.erase(std::unique(r.gpu_models.begin(), r.gpu_models.end()), r.gpu_models.end());
  if (p.num_gpu == 0) return r;
  const int per_card = p.num_gpu > 1 ? 100 : std::clamp((p.gpu_milli + 5) / 10, 1, 100);
  r.containers.push_back(ContainerRequest{"main", false, per_card * p.num_gpu, 0, 0, p.num_gpu});
  return r;
}

int64_t CoreLeft(const NodeState& n) {
  int64_t left = 0;
  for (const auto& c : n.cards) left += 100 - c.usage.core;
  return left;
}

int FullyFree(const NodeState& n) {
  int free = 0;
  for (const auto& c : n.cards) free += c.usage.core == 0;
  return free;
}

// The paper's BestFit: lower Σ w·(free − request)/maxSpec is better; scaled to an integer 0..100, higher
// better.
int64_t BestFitScore(const SimNode& n, const TracePod& p, const PodRequest& r) {
  const double gpu_request = r.AsksForGpu() ? r.containers[0].core * 10.0 : 0.0;
  double s =
      0.5 * (n.cpu_left - p.cpu_milli) / 128000.0 + 0.5 * (CoreLeft(n.gpu) * 10.0 - gpu_request) / 8000.0;
  return static_cast<int64_t>((1.0 - s) * 100);
}

// The paper's GpuPacking: a shared card first, then free cards on a used node, an empty node last.
int64_t PackingScore(const SimNode& n, const PodRequest& r) {
  if (!r.AsksForGpu()) return 0;
  const NodeState& g = n.gpu;
  const int free = FullyFree(g);
  if (free == static_cast<int>(g.cards.size())) return std::max<int64_t>(100 / 3 - free, free);
  std::vector<int> order(g.cards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return g.cards[a].usage.core > g.cards[b].usage.core; });
  const ContainerRequest& c = r.containers[0];
  int need = c.card_count, free_used = 0;
  int64_t left_on_used = 0;
  for (int i : order) {
    if (need == 0) break;
    const int left = 100 - g.cards[i].usage.core;
    if (c.CorePerCard() <= left) {
      --need;
      free_used += left == 100;
      left_on_used += left;
    }
  }
  if (free_used > 0) return std::max<int64_t>(100 / 2 - free_used, 100 / 3);
  return std::max<int64_t>(100 - left_on_used / 10, 100 / 2);
}

// kube-scheduler's default node score for a pod without mgpu's extender: NodeResourcesFit (LeastAllocated:
// the mean free share of CPU and memory after the pod, 0..100) plus NodeResourcesBalancedAllocation (100 less
// the spread of the two used shares, 0..100).
int64_t KubeDefaultScore(const SimNode& n, const TracePod& p) {
  const double cpu_used = 1.0 - static_cast<double>(n.cpu_left - p.cpu_milli) / n.trace->cpu_milli;
  const double mem_used = 1.0 - static_cast<double>(n.memory_left - p.memory_mib) / n.trace->memory_mib;
  const double least = ((1 - cpu_used) + (1 - mem_used)) / 2 * 100;
  const double balanced = (1 - std::abs(cpu_used - mem_used) / 2) * 100;
  return static_cast<int64_t>(least) + static_cast<int64_t>(balanced);
}

// Random's card choice: any card that can take a sharing pod; whole cards as the allocator picks them.
Result<Assignment> RandomCard(const NodeState& node, const PodRequest& req, std::mt19937_64& rng) {
  const ContainerRequest& c = req.containers[0];
  if (c.card_count > 1 || c.core == 100) return ChooseCards(node, req);
  std::vector<const CardState*> fits;
  for (const auto& card : node.cards) {
    if (card.card.healthy && card.usage.core + c.core <= 100) fits.push_back(&card);
  }
  if (fits.empty()) return Error{"no card"};
  const CardState* card = fits[std::uniform_int_distribution<size_t>(0, fits.size() - 1)(rng)];
  return Assignment{{{c.name, {{card->card.uuid, c.core, 0, 0}}}}};
}

// kube-scheduler's DRA allocator on mgpu's devices: every container's share on the first cards, in `order`
// (positions into node.cards), that can take it. A card takes a share when the allocator's per-card rules
// admit it there (the rules the devices' capacities and sharing counter carry).
Result<Assignment> FirstFitCards(const NodeState& node, const PodRequest& pod,
                                 const std::vector<int>& order) {
  NodeState scratch = node;
  Assignment out;
  for (const ContainerRequest& c : pod.containers) {
    PodRequest one = pod;
    one.containers = {c};
    ContainerRequest& share = one.containers[0];
    share.core = c.CorePerCard();
    share.reclaimed_core = c.ReclaimedCorePerCard();
    share.memory_mib = c.MemoryPerCardMiB();
    share.card_count = 1;
    ContainerAssignment chosen{c.name, {}};
    for (int pos : order) {
      if (static_cast<int>(chosen.cards.size()) == c.card_count) break;
      const CardShare card{scratch.cards[pos].card.uuid, share.core, share.reclaimed_core, share.memory_mib};
      NodeState probe = scratch;
      if (Apply(probe, one, Assignment{{ContainerAssignment{c.name, {card}}}}).ok())
        chosen.cards.push_back(card);
    }
    if (static_cast<int>(chosen.cards.size()) < c.card_count) return Error{"no first fit"};
    out.containers.push_back(std::move(chosen));
  }
  return out;
}

// The order a DRA driver lists a node's cards in: by index, or fullest first (most online core taken, then
// memory, then index).
std::vector<int> DeviceOrder(const NodeState& node, bool fullest_first) {
  std::vector<int> order(node.cards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  if (fullest_first) {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const CardUsage &x = node.cards[a].usage, &y = node.cards[b].usage;
      if (x.core != y.core) return x.core > y.core;
      return x.memory_mib > y.memory_mib;
    });
  }
  return order;
}

constexpr int kMark100 = 20, kMark130 = 26;  // threshold indices of the 100 % and 130 % marks

struct RunResult {
  double allocated[kThresholds] = {};  // % of cluster GPUs allocated when arrivals reach 5·i %
  int failed[kKinds] = {};             // over the whole run
  int failed_at100[kKinds] = {};       // ... and until arrivals reach 100 %
  double cpu_unplaced_at100 = 0;       // CPU the failed pods asked for until then, % of the cluster's CPU
  double cpu_unplaced = 0;             // ... and over the whole run
  std::vector<double> decision_us;
};

// GPUs a pod asks for, in cards (a sharing pod's share as mgpu rounds it).
double GpusOf(const TracePod& p) {
  return p.num_gpu ? p.num_gpu * RequestOf(p).containers.front().CorePerCard() / 100.0 : 0.0;
}

// The arrival sequence of one seed (steps 1 and 2 of the protocol); `rng` goes on to break ties.
std::vector<TracePod> Arrivals(const std::vector<TracePod>& sorted, double total_gpus, std::mt19937_64& rng,
                               size_t limit) {
  std::vector<TracePod> pods = sorted;
  std::shuffle(pods.begin(), pods.end(), rng);
  const double cap = 1.3 * total_gpus;
  double requested = 0;
  for (const auto& p : pods) requested += GpusOf(p);
  while (requested > cap && !pods.empty()) {  // already above: drop random pods
    const size_t i = std::uniform_int_distribution<size_t>(0, pods.size() - 1)(rng);
    requested -= GpusOf(pods[i]);
    pods.erase(pods.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (;;) {  // inflate: sample with replacement until the next pod would pass 130 %
    const TracePod& p = sorted[std::uniform_int_distribution<size_t>(0, sorted.size() - 1)(rng)];
    const double g = GpusOf(p);
    if (requested + g > cap) break;
    requested += g;
    pods.push_back(p);
  }
  if (limit > 0 && pods.size() > limit) pods.resize(limit);
  return pods;
}

std::vector<SimNode> EmptyCluster(const std::vector<TraceNode>& trace_nodes) {
  std::vector<SimNode> nodes;
  nodes.reserve(trace_nodes.size());
  for (const auto& t : trace_nodes) {
    NodeInventory inv;
    for (int i = 0; i < t.gpus; ++i) {
      inv.cards.push_back(
          Card{i, t.name + "-gpu" + std::to_string(i), t.model, ModelMemoryMiB(t.model), true});
    }
    nodes.push_back(SimNode{&t, MakeNodeState(t.name, inv, Config()), t.cpu_milli, t.memory_mib});
    nodes.back().gpu.cpu_free_milli = t.cpu_milli;
    nodes.back().gpu.host_memory_free_mib = t.memory_mib;
  }
  return nodes;
}

// Whether the node's CPU, memory and GPU model admit the pod (the GPU part is Place's).
bool HostFits(const SimNode& n, const TracePod& p) {
  if (n.cpu_left < p.cpu_milli || n.memory_left < p.memory_mib) return false;
  return p.models.empty() || std::find(p.models.begin(), p.models.end(), n.trace->model) != p.models.end();
}

// Takes the pod's CPU and memory on the node.
void BindHost(SimNode& n, const TracePod& p) {
  n.cpu_left -= p.cpu_milli;
  n.memory_left -= p.memory_mib;
  n.zero_cpu_pods += p.cpu_milli == 0;
  n.zero_memory_pods += p.memory_mib == 0;
  n.gpu.cpu_free_milli = n.cpu_left;
  n.gpu.host_memory_free_mib = n.memory_left;
}

// Puts the pod on the node with the cards `assignment` names.
void Bind(SimNode& n, const TracePod& p, const PodRequest& req, const Result<Assignment>& assignment) {
  BindHost(n, p);
  if (!req.AsksForGpu()) return;
  if (!assignment.ok() || !Apply(n.gpu, req, *assignment).ok()) {
    std::cerr << "internal error: chosen node cannot take the pod\n";
    std::exit(1);
  }
}

// Records a run as its pods arrive: allocation at every threshold, failures and unplaced CPU at 100 %.
class Recorder {
 public:
  Recorder(double total_gpus, double total_cpu_milli)
      : total_gpus_(total_gpus), total_cpu_(total_cpu_milli) {}
  void Arrived(const TracePod& p, bool placed) {
    if (placed) {
      allocated_ += GpusOf(p);
    } else {
      out_.failed[KindOf(p)]++;
      failed_cpu_ += static_cast<double>(p.cpu_milli);
    }
    arrived_ += GpusOf(p);
    while (next_ < kThresholds && arrived_ * 100.0 / total_gpus_ >= 5.0 * next_) Mark();
  }
  RunResult& Finish() {
    while (next_ < kThresholds) Mark();
    out_.cpu_unplaced = failed_cpu_ * 100.0 / total_cpu_;
    return out_;
  }
  RunResult& result() { return out_; }

 private:
  void Mark() {
    out_.allocated[next_] = allocated_ * 100.0 / total_gpus_;
    if (next_ == kMark100) {
      std::copy(std::begin(out_.failed), std::end(out_.failed), std::begin(out_.failed_at100));
      out_.cpu_unplaced_at100 = failed_cpu_ * 100.0 / total_cpu_;
    }
    ++next_;
  }
  double total_gpus_, total_cpu_;
  double arrived_ = 0, allocated_ = 0, failed_cpu_ = 0;
  int next_ = 0;
  RunResult out_;
};

// The offline reference: the same pods, all known in advance. The pods that take whole cards go first,
// largest first (then those bound to GPU models, then the larger CPU ask); the sharing and CPU-only pods
// follow in their arrival order (sorted by share they did far worse: the 81 % pods come first and the
// small ones that fill their gaps last, with the CPU spent). Each goes to the node of least fragmentation
// growth under a workload model that has seen every pod of the list. Not a scheduler anyone could run
// online, but an estimate of what the same pods could fill. First-fit decreasing by GPU then CPU, the
// textbook heuristic, leaves 6-9 % of the GPUs unallocated at 100 % (CPU runs out beside free cards), far
// worse than mgpu online, so it is no reference. With `keep_order` every pod goes in arrival order.
struct Packed {
  double allocated = 0;  // % of cluster GPUs
  int failed[kKinds] = {};
  double failed_cpu_milli = 0;
};

Packed PackOffline(const std::vector<TraceNode>& trace_nodes, std::vector<TracePod> pods, double total_gpus,
                   bool keep_order) {
  if (!keep_order) {
    const auto whole = std::stable_partition(pods.begin(), pods.end(), [](const TracePod& p) {
      return KindOf(p) == kOneGpu || KindOf(p) == kMultiGpu;
    });
    std::stable_sort(pods.begin(), whole, [](const TracePod& a, const TracePod& b) {
      if (a.num_gpu != b.num_gpu) return a.num_gpu > b.num_gpu;
      if (a.models.empty() != b.models.empty()) return b.models.empty();
      return a.cpu_milli > b.cpu_milli;
    });
  }
  std::vector<SimNode> nodes = EmptyCluster(trace_nodes);
  WorkloadModel workload(1.0);
  for (const TracePod& p : pods) workload.Observe(RequestOf(p));
  // The free core per model, kept as pods are placed, and no list of the nodes: this reference sets its
  // cluster at every pod, where a list of the 1,213 nodes would cost many times the rest, so its model has
  // no multi-card shape's host pressure (WorkloadModel::SetClusterFree).
  ClusterFree cluster;
  for (const SimNode& n : nodes) cluster.core[n.gpu.product] += 100.0 * n.trace->gpus;
  Packed out;
  Placement placed;
  double allocated = 0;
  for (const TracePod& p : pods) {
    PodRequest req = RequestOf(p);
    req.card_policy = CardPolicy::kFragmentation;
    workload.SetClusterFree(cluster);
    SimNode* pick = nullptr;
    double best = INFINITY;
    for (SimNode& n : nodes) {
      if (!HostFits(n, p) || !Place(n.gpu, req, &workload, placed)) continue;
      const double cost = PlacementCost(n.gpu, req, placed, NodePolicy::kFragmentation, &workload);
      if (cost < best) best = cost, pick = &n;
    }
    if (pick == nullptr) {
      out.failed[KindOf(p)]++;
      out.failed_cpu_milli += static_cast<double>(p.cpu_milli);
      continue;
    }
    Bind(*pick, p, req, req.AsksForGpu() ? ChooseCards(pick->gpu, req, &workload) : Assignment{});
    allocated += GpusOf(p);
    cluster.core[pick->gpu.product] -= 100.0 * GpusOf(p);
  }
  out.allocated = allocated * 100.0 / total_gpus;
  return out;
}

RunResult ReplayOffline(const std::vector<TraceNode>& trace_nodes, const std::vector<TracePod>& sorted,
                        uint32_t seed, size_t limit, bool keep_order) {
  double total_gpus = 0, total_cpu = 0;
  for (const auto& n : trace_nodes) total_gpus += n.gpus, total_cpu += static_cast<double>(n.cpu_milli);
  std::mt19937_64 rng(seed);
  const std::vector<TracePod> pods = Arrivals(sorted, total_gpus, rng, limit);
  // The pods that have arrived when arrivals reach 100 %: up to and with the one that reaches it.
  size_t at100 = 0;
  for (double arrived = 0; at100 < pods.size() && arrived * 100.0 / total_gpus < 100.0; ++at100)
    arrived += GpusOf(pods[at100]);
  RunResult out;
  const Packed first = PackOffline(trace_nodes, {pods.begin(), pods.begin() + at100}, total_gpus, keep_order);
  const Packed all = PackOffline(trace_nodes, pods, total_gpus, keep_order);
  std::fill(std::begin(out.allocated), std::end(out.allocated), NAN);
  out.allocated[kMark100] = first.allocated;
  out.allocated[kMark130] = all.allocated;
  std::copy(std::begin(first.failed), std::end(first.failed), std::begin(out.failed_at100));
  std::copy(std::begin(all.failed), std::end(all.failed), std::begin(out.failed));
  out.cpu_unplaced_at100 = first.failed_cpu_milli * 100.0 / total_cpu;
  out.cpu_unplaced = all.failed_cpu_milli * 100.0 / total_cpu;
  return out;
}

// One policy's scheduler over a simulated cluster, a pod at a time. The mgpu policies run the extender's
// model: it learns every pod it is asked to filter (once per uid) and publishes the model every 16 of them,
// with the free core per GPU model its cache sums at that moment (kept here as pods bind and leave).
class Scheduler {
 public:
  Scheduler(Policy policy, std::vector<SimNode>& nodes, std::mt19937_64& rng, const KubeSchedulerModel& kube)
      : policy_(policy),
        kube_(kube),
        dra_(policy == Policy::kDraFirstFit || policy == Policy::kDraFullestFirst ||
             policy == Policy::kDraKube),
        mgpu_policy_(policy == Policy::kBinpack || policy == Policy::kSpread ||
                     policy == Policy::kFragmentation || policy == Policy::kAsShipped ||
                     (dra_ && policy != Policy::kDraKube)),
        nodes_(nodes),
        rng_(rng) {
    if (policy == Policy::kSpread) node_policy_ = NodePolicy::kSpread;
    if (policy == Policy::kFragmentation || policy == Policy::kAsShipped || dra_)
      node_policy_ = NodePolicy::kFragmentation;
  }

  // What every node has left, as the workload model reads the cluster (ModelPublisher, when it publishes).
  ClusterFree Cluster() const {
    ClusterFree out;
    out.nodes.reserve(nodes_.size());
    for (const SimNode& n : nodes_) out.Add(n.gpu);
    return out;
  }

  // The request `p` stands for under this policy (`uid`: learned once; empty: every time).
  PodRequest RequestFor(const TracePod& p, const std::string& uid = "") const {
    PodRequest req = RequestOf(p);
    req.uid = uid;
    req.node_policy = node_policy_;
    if (policy_ == Policy::kFragmentation || policy_ == Policy::kAsShipped || dra_)
      req.card_policy = CardPolicy::kFragmentation;
    return req;
  }

  // Puts `p` on the node the policy chooses, taking its CPU, memory and cards (`cards`); returns the node's
  // index, or SIZE_MAX when no node fits.
  size_t Schedule(const TracePod& p, const PodRequest& req, Assignment& cards) {
    feasible_.clear();
    size_t pick = SIZE_MAX;
    if (policy_ == Policy::kAsShipped) return ScheduleAsShipped(p, req, cards);
    if (mgpu_policy_) {
      // The extender's own cycle (common/scheduler.h) over the nodes kube-scheduler's filters leave; CPU-only
      // pods reach the extender too when its managedResources are left empty, and always fit.
      for (size_t i = 0; i < nodes_.size(); ++i)
        if (HostFits(nodes_[i], p)) feasible_.push_back(i);
      if (dra_) return ScheduleDra(p, req, cards);
      return Extend(p, req, cards);
    }
    const ModelPublisher::Published model = publisher_.Observe(req, [this] { return Cluster(); });
    const WorkloadModel* workload = model.model.get();
    scores_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      SimNode& n = nodes_[i];
      if (!HostFits(n, p) || !Place(n.gpu, req, workload, placed_)) continue;
      int64_t score = 0;
      if (policy_ == Policy::kBestFit) score = BestFitScore(n, p, req);
      if (policy_ == Policy::kPacking) score = PackingScore(n, req);
      if (policy_ == Policy::kDraKube) score = KubeDefaultScore(n, p);
      scores_.push_back(score);
      feasible_.push_back(i);
    }
    best_.clear();
    int64_t best_score = INT64_MIN;
    for (size_t k = 0; k < feasible_.size(); ++k) {
      if (scores_[k] > best_score) {
        best_score = scores_[k];
        best_.assign(1, feasible_[k]);
      } else if (scores_[k] == best_score) {
        best_.push_back(feasible_[k]);
      }
    }
    // Equal top scores: the paper's simulator takes the first node in name order (its baselines only
    // reproduce that way); kube-scheduler picks one at random. Random scores all alike.
    if (best_.empty()) return SIZE_MAX;
    pick = policy_ == Policy::kRandom || dra_ ? best_[random_pick_(best_.size())] : best_[0];
    if (dra_) return BindFirstFit(pick, p, req, cards) ? pick : SIZE_MAX;
    SimNode& n = nodes_[pick];
    Result<Assignment> chosen = Assignment{};
    if (req.AsksForGpu())
      chosen = policy_ == Policy::kRandom ? RandomCard(n.gpu, req, rng_) : ChooseCards(n.gpu, req, workload);
    Bind(n, p, req, chosen);
    cards = chosen.ok() ? std::move(*chosen) : Assignment{};
    return pick;
  }

  // Takes `p` off node `node`, where it holds `cards`.
  void Remove(size_t node, const TracePod& p, const PodRequest& req, const Assignment& cards) {
    SimNode& n = nodes_[node];
    if (req.AsksForGpu()) {
      if (!Release(n.gpu, req, cards).ok()) {
        std::cerr << "internal error: pod " << p.name << " does not hold its cards\n";
        std::exit(1);
      }
    }
    n.cpu_left += p.cpu_milli;
    n.memory_left += p.memory_mib;
    n.zero_cpu_pods -= p.cpu_milli == 0;
    n.zero_memory_pods -= p.memory_mib == 0;
    n.gpu.cpu_free_milli = n.cpu_left;
    n.gpu.host_memory_free_mib = n.memory_left;
  }

  // Puts `p` on node `node` on `cards` (a move a defragmentation plan chose).
  void Put(size_t node, const TracePod& p, const PodRequest& req, const Assignment& cards) {
    SimNode& n = nodes_[node];
    Bind(n, p, req, cards);
  }

  const WorkloadModel* model() const { return publisher_.Current().model.get(); }

 private:
  // The extender's cycle (common/scheduler.h, ScheduleOne) over the nodes in feasible_: puts `p` on the node
  // it chooses, as Schedule says.
  size_t Extend(const TracePod& p, const PodRequest& req, Assignment& cards) {
    candidates_.clear();
    for (size_t i : feasible_) candidates_.push_back(&nodes_[i].gpu);
    Result<Scheduled> scheduled = ScheduleOne(
        candidates_, req, publisher_, [this] { return Cluster(); },
        /*with_reasons=*/false, random_pick_, placed_);
    if (!scheduled.ok()) {
      std::cerr << "internal error: chosen node cannot take the pod: " << scheduled.message() << "\n";
      std::exit(1);
    }
    if (scheduled->node == Scheduled::kNowhere) return SIZE_MAX;
    const size_t pick = feasible_[scheduled->node];
    SimNode& n = nodes_[pick];
    BindHost(n, p);
    cards = std::move(scheduled->assignment);
    return pick;
  }

  // mgpu-as-shipped: kube-scheduler's sample of feasible nodes (its filters: CPU, memory, the GPU model's
  // node selector and the sum of mgpu-core the node advertises against what its pods request), then the
  // extender's `choose` over that sample for a pod the extender sees (one node comes back, which
  // kube-scheduler binds without scoring: schedule_one.go, schedulePod), kube-scheduler's scores otherwise.
  size_t ScheduleAsShipped(const TracePod& p, const PodRequest& req, Assignment& cards) {
    const int64_t core = req.AsksForGpu() ? req.containers[0].core : 0;
    const auto fits = [&](size_t i) {
      const SimNode& n = nodes_[i];
      return HostFits(n, p) && CoreLeft(n.gpu) >= core;
    };
    const int32_t num_nodes = static_cast<int32_t>(nodes_.size());
    const size_t to_find = static_cast<size_t>(
        core > 0 && kube_.gpu_pod_percentage
            ? KubeSchedulerModel::NumFeasibleNodesToFind(num_nodes, *kube_.gpu_pod_percentage)
            : kube_.NumFeasibleNodesToFind(num_nodes));
    feasible_ = sampler_.Sample(nodes_.size(), to_find, fits);
    if (feasible_.empty()) return SIZE_MAX;
    std::vector<std::string> resources;
    if (core > 0) resources.push_back(kCoreResource);
    if (kube_.ExtenderDecides(resources)) return Extend(p, req, cards);
    KubeAmounts pod{p.cpu_milli, p.memory_mib * kMiB, {}};
    if (core > 0) pod.scalar[kCoreResource] = core;
    scores_.clear();
    for (size_t i : feasible_) scores_.push_back(kube_.Score(KubeView(nodes_[i]), pod));
    const size_t pick = feasible_[TopScoredNode(scores_)];
    SimNode& n = nodes_[pick];
    // Without the extender a GPU pod (managedResources not listing mgpu-core) still gets cards: mgpu's
    // allocator on the node kube-scheduler chose, or no placement when they do not fit there.
    Result<Assignment> chosen = Assignment{};
    if (req.AsksForGpu()) {
      if (!Place(n.gpu, req, publisher_.Current().model.get(), placed_)) return SIZE_MAX;
      chosen = ChooseCards(n.gpu, req, publisher_.Current().model.get());
    }
    Bind(n, p, req, chosen);
    cards = chosen.ok() ? std::move(*chosen) : Assignment{};
    return pick;
  }

  // A node as kube-scheduler's cache sees it: memory in bytes, mgpu-core in percent of a card.
  static KubeNodeView KubeView(const SimNode& n) {
    KubeNodeView v;
    v.allocatable = {n.trace->cpu_milli, n.trace->memory_mib * kMiB, {{kCoreResource, 100 * n.trace->gpus}}};
    v.requested = {n.trace->cpu_milli - n.cpu_left,
                   (n.trace->memory_mib - n.memory_left) * kMiB,
                   {{kCoreResource, 100 * n.trace->gpus - CoreLeft(n.gpu)}}};
    v.nonzero_requested = v.requested;
    v.nonzero_requested.cpu_milli += 100 * n.zero_cpu_pods;         // util.DefaultMilliCPURequest
    v.nonzero_requested.memory += 200 * kMiB * n.zero_memory_pods;  // util.DefaultMemoryRequest
    return v;
  }
  static constexpr int64_t kMiB = 1024 * 1024;
  static constexpr const char* kCoreResource = "mgpu.io/mgpu-core";

  // DRA with mgpu's prioritize: the extender's decisions and scores over the feasible nodes pick the node,
  // then kube-scheduler's allocator takes the first cards there that fit.
  size_t ScheduleDra(const TracePod& p, const PodRequest& req, Assignment& cards) {
    const ModelPublisher::Published model = publisher_.Observe(req, [this] { return Cluster(); });
    std::vector<NodeDecision> decisions;
    decisions.reserve(candidates_.size());
    for (const NodeState* node : candidates_)
      decisions.push_back(Decide(*node, req, model.model.get(), /*with_reason=*/false, placed_));
    const std::vector<int> extender = Scores(decisions);
    best_.clear();
    int best_score = -1;
    for (size_t k = 0; k < candidates_.size(); ++k) {
      if (!decisions[k].fits || extender[k] < best_score) continue;
      if (extender[k] > best_score) best_.clear();
      best_score = extender[k];
      best_.push_back(feasible_[k]);
    }
    if (best_.empty()) return SIZE_MAX;
    const size_t pick = best_[random_pick_(best_.size())];
    return BindFirstFit(pick, p, req, cards) ? pick : SIZE_MAX;
  }

  // kube-scheduler's DRA allocator on node `i`: the first cards that fit, in the order the driver lists them
  // (fullest first for dra-fullest-first). False when none fit where mgpu's own choice would (not seen on
  // openb).
  bool BindFirstFit(size_t i, const TracePod& p, const PodRequest& req, Assignment& cards) {
    SimNode& n = nodes_[i];
    Result<Assignment> chosen =
        req.AsksForGpu() ? FirstFitCards(n.gpu, req, DeviceOrder(n.gpu, policy_ == Policy::kDraFullestFirst))
                         : Result<Assignment>(Assignment{});
    if (!chosen.ok()) return false;
    Bind(n, p, req, chosen);
    cards = std::move(*chosen);
    return true;
  }

  const Policy policy_;
  const KubeSchedulerModel& kube_;
  NodeSampler sampler_;
  const bool dra_;
  const bool mgpu_policy_;
  NodePolicy node_policy_ = NodePolicy::kBinpack;
  std::vector<SimNode>& nodes_;
  std::mt19937_64& rng_;
  ModelPublisher publisher_;
  std::vector<size_t> feasible_, best_;
  std::vector<NodeState*> candidates_;  // mgpu policies: the nodes whose CPU, memory and GPU model fit
  std::vector<int64_t> scores_;
  // Equal top scores: kube-scheduler, which ranks the extender's scores, picks one at random.
  const std::function<size_t(size_t)> random_pick_ = [this](size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  };
  Placement placed_;
};

RunResult Replay(const std::vector<TraceNode>& trace_nodes, const std::vector<TracePod>& sorted,
                 Policy policy, uint32_t seed, size_t limit, const KubeSchedulerModel& kube) {
  if (policy == Policy::kOffline || policy == Policy::kOfflineArrival)
    return ReplayOffline(trace_nodes, sorted, seed, limit, policy == Policy::kOfflineArrival);
  double total_gpus = 0, total_cpu = 0;
  for (const auto& n : trace_nodes) total_gpus += n.gpus, total_cpu += static_cast<double>(n.cpu_milli);
  std::mt19937_64 rng(seed);
  const std::vector<TracePod> pods = Arrivals(sorted, total_gpus, rng, limit);
  std::vector<SimNode> nodes = EmptyCluster(trace_nodes);
  Scheduler scheduler(policy, nodes, rng, kube);
  Recorder record(total_gpus, total_cpu);
  std::vector<double>& decision_us = record.result().decision_us;
  decision_us.reserve(pods.size());
  Assignment cards;
  for (const TracePod& p : pods) {
    const PodRequest req = scheduler.RequestFor(p);
    const auto start = std::chrono::steady_clock::now();
    const size_t pick = scheduler.Schedule(p, req, cards);
    decision_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    record.Arrived(p, pick != SIZE_MAX);
  }
  return std::move(record.Finish());
}

// The replay with departures (--departures): pods arrive at their creation_time and, once placed, run as long
// as the trace says (deletion_time - creation_time); a pod no node takes waits, is tried again whenever a pod
// leaves (kube-scheduler moves unschedulable pods back to its queue on such events), in arrival order, and
// gives up at its deletion_time (failed). The trace's times put at most ~66 GPUs' worth of pods on the
// cluster at once, so the cluster is a sample of the trace's nodes (SampleCluster) of `cluster_gpus`, sized
// so that demand exceeds it at peaks.
// mgpu-defrag is mgpu-fragmentation that, when a GPU pod fits no node though the free capacity would hold it
// (FreeCapacityShortfall), carries out the defragmentation plan (PlanDefrag) that makes room, moving the
// trace's best-effort (qos BE) one-card pods as the product would move offline pods: a moved pod keeps its
// departure time.
struct DepartureResult {
  double cluster_gpus = 0;
  double allocated =
      0;  // % of the cluster's GPUs, time-weighted from the first arrival to the last departure
  double allocated_short = 0;  // ... over the time the demand (placed and waiting pods) exceeded the cluster
  double short_hours = 0;
  int failed[kKinds] = {};      // gave up waiting
  std::vector<double> waits_s;  // of the placed pods that waited
  int blocked = 0;              // GPU pods fragmentation stopped at some try (FreeCapacityShortfall empty)
  int plans = 0, moves = 0;     // mgpu-defrag: plans carried out, pods moved
};

// What decides whether a trace pod fits: two pods of one shape fit the same nodes.
std::string ShapeOf(const TracePod& p) {
  std::string shape = std::to_string(p.cpu_milli) + "," + std::to_string(p.memory_mib) + "," +
                      std::to_string(p.num_gpu) + "," + std::to_string(p.gpu_milli);
  for (const std::string& m : p.models) shape += "," + m;
  return shape;
}

// Per GPU model, nodes drawn at random while they bring the model closer to its share of `cluster_gpus`;
// a model some pod is pinned to gets at least one node.
std::vector<TraceNode> SampleCluster(const std::vector<TraceNode>& all, const std::vector<TracePod>& pods,
                                     double cluster_gpus, uint32_t seed) {
  std::set<std::string> pinned;
  for (const TracePod& p : pods) pinned.insert(p.models.begin(), p.models.end());
  std::map<std::string, std::vector<const TraceNode*>> by_model;
  double total = 0;
  for (const TraceNode& n : all) by_model[n.model].push_back(&n), total += n.gpus;
  std::mt19937_64 rng(seed);
  std::vector<TraceNode> out;
  for (auto& [model, nodes] : by_model) {
    std::shuffle(nodes.begin(), nodes.end(), rng);
    double share = 0;
    for (const TraceNode* n : nodes) share += n->gpus;
    const double want = cluster_gpus * share / total;
    double taken = 0;
    for (const TraceNode* n : nodes) {
      const bool needed = taken == 0 && pinned.count(model);
      if (!needed && taken + n->gpus / 2.0 > want) break;
      out.push_back(*n);
      taken += n->gpus;
    }
  }
  return out;
}

// The most GPUs the list's pods ask for at once when each runs from creation_time to deletion_time.
double PeakDemand(const std::vector<TracePod>& pods) {
  std::vector<std::pair<int64_t, double>> events;
  for (const TracePod& p : pods) {
    events.push_back({p.created, GpusOf(p)});
    events.push_back({p.deleted, -GpusOf(p)});
  }
  std::sort(events.begin(), events.end());  // a departure sorts before an arrival at the same second
  double now = 0, peak = 0;
  for (const auto& [t, g] : events) peak = std::max(peak, now += g);
  return peak;
}

DepartureResult ReplayDepartures(const std::vector<TraceNode>& trace_nodes, const std::vector<TracePod>& list,
                                 Policy policy, uint32_t seed, double cluster_gpus) {
  std::vector<TracePod> pods = list;
  std::stable_sort(pods.begin(), pods.end(),
                   [](const TracePod& a, const TracePod& b) { return a.created < b.created; });
  const std::vector<TraceNode> sample = SampleCluster(trace_nodes, list, cluster_gpus, seed);
  std::vector<SimNode> nodes = EmptyCluster(sample);
  DepartureResult out;
  for (const TraceNode& n : sample) out.cluster_gpus += n.gpus;
  std::mt19937_64 rng(seed);
  const bool defrag = policy == Policy::kDefrag;
  const KubeSchedulerModel no_kube;  // mgpu-as-shipped has no run with departures
  Scheduler scheduler(defrag ? Policy::kFragmentation : policy, nodes, rng, no_kube);

  struct Running {
    size_t node = SIZE_MAX;
    Assignment cards;
    int64_t until = 0;
  };
  std::vector<Running> running(pods.size());
  std::vector<bool> blocked(pods.size());
  std::vector<PodRequest> requests;
  requests.reserve(pods.size());
  for (size_t i = 0; i < pods.size(); ++i)
    requests.push_back(scheduler.RequestFor(pods[i], pods[i].name + "#" + std::to_string(i)));
  using Departure = std::pair<int64_t, size_t>;  // (time, pod)
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<size_t> waiting;  // in arrival order
  std::vector<const NodeState*> states;
  for (const SimNode& n : nodes) states.push_back(&n.gpu);
  double allocated = 0, demand = 0, area = 0, short_area = 0, short_time = 0;

  // Carries out a plan that makes room for pod i: the moves, then the pod itself.
  const auto carry_out = [&](size_t i, const DefragPlan& plan) {
    for (const DefragMove& move : plan.moves) {
      const size_t moved = std::stoul(move.pod);
      scheduler.Remove(move.from, pods[moved], requests[moved], running[moved].cards);
      scheduler.Put(move.to, pods[moved], requests[moved], move.cards);
      running[moved].node = move.to;
      running[moved].cards = move.cards;
    }
    scheduler.Put(plan.node, pods[i], requests[i], plan.cards);
    running[i].node = plan.node;
    running[i].cards = plan.cards;
    ++out.plans;
    out.moves += static_cast<int>(plan.moves.size());
  };
  // Tries pod i at time t; true when placed.
  const auto try_place = [&](size_t i, int64_t t) {
    const TracePod& p = pods[i];
    running[i].node = scheduler.Schedule(p, requests[i], running[i].cards);
    if (running[i].node == SIZE_MAX && p.num_gpu > 0 && FreeCapacityShortfall(states, requests[i]).empty()) {
      out.blocked += !blocked[i];
      blocked[i] = true;
      if (defrag) {
        std::vector<MovablePod> movable;
        for (size_t k = 0; k < pods.size(); ++k)
          if (running[k].node != SIZE_MAX && pods[k].best_effort && pods[k].num_gpu == 1)
            movable.push_back(MovablePod{std::to_string(k), running[k].node, requests[k], running[k].cards});
        if (Result<DefragPlan> plan = PlanDefrag(states, movable, requests[i], scheduler.model()); plan.ok())
          carry_out(i, *plan);
      }
    }
    if (running[i].node == SIZE_MAX) return false;
    running[i].until = t + (p.deleted - p.created);
    departures.push({running[i].until, i});
    allocated += GpusOf(p);
    return true;
  };

  size_t next = 0;
  int64_t now = pods.empty() ? 0 : pods.front().created;
  while (next < pods.size() || !departures.empty() || !waiting.empty()) {
    int64_t t = INT64_MAX;
    if (next < pods.size()) t = pods[next].created;
    if (!departures.empty()) t = std::min(t, departures.top().first);
    for (size_t i : waiting) t = std::min(t, pods[i].deleted);
    area += allocated * static_cast<double>(t - now);
    if (demand > out.cluster_gpus) {
      short_area += allocated * static_cast<double>(t - now);
      short_time += static_cast<double>(t - now);
    }
    now = t;
    bool left = false;
    while (!departures.empty() && departures.top().first <= t) {
      const size_t i = departures.top().second;
      departures.pop();
      scheduler.Remove(running[i].node, pods[i], requests[i], running[i].cards);
      running[i].node = SIZE_MAX;
      allocated -= GpusOf(pods[i]);
      demand -= GpusOf(pods[i]);
      left = true;
    }
    if (left) {
      // Retry the waiting pods in arrival order. Placing pods only takes capacity, so a shape that failed in
      // this pass fails again, unless a plan moved pods since.
      std::set<std::string> failed_shapes;
      std::vector<size_t> still;
      for (size_t i : waiting) {
        const std::string shape = ShapeOf(pods[i]);
        const int plans = out.plans;
        const bool placed = !failed_shapes.count(shape) && try_place(i, t);
        if (out.plans != plans) failed_shapes.clear();
        if (placed) {
          out.waits_s.push_back(static_cast<double>(t - pods[i].created));
          continue;
        }
        failed_shapes.insert(shape);
        still.push_back(i);
      }
      waiting = std::move(still);
    }
    std::erase_if(waiting, [&](size_t i) {
      if (pods[i].deleted > t) return false;
      out.failed[KindOf(pods[i])]++;
      demand -= GpusOf(pods[i]);
      return true;
    });
    for (; next < pods.size() && pods[next].created <= t; ++next) {
      demand += GpusOf(pods[next]);
      if (try_place(next, t)) continue;
      if (pods[next].deleted > t) {
        waiting.push_back(next);
      } else {
        out.failed[KindOf(pods[next])]++;
        demand -= GpusOf(pods[next]);
      }
    }
  }
  const double span = pods.empty() ? 0 : static_cast<double>(now - pods.front().created);
  out.allocated = span > 0 ? area / span * 100.0 / out.cluster_gpus : 0;
  out.allocated_short = short_time > 0 ? short_area / short_time * 100.0 / out.cluster_gpus : 0;
  out.short_hours = short_time / 3600;
  return out;
}

// The published means per (trace, policy) at arrivals of 100 % and 130 %: unallocated GPU %.
struct Published {
  double at100 = NAN, at130 = NAN;
};

std::map<std::pair<std::string, std::string>, Published> LoadPublished(const std::string& dir) {
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> runs;
  for (const auto& r : ReadCsv(dir + "/published_allocation_reference.csv")) {
    // workload,sc_policy,tune,seed,total_gpus,0,5,...,130: allocated % at 100 is column 5 + 20.
    if (r.size() < 5 + kThresholds) continue;
    std::string trace = r[0].substr(r[0].find("list_") + 5);
    std::string policy = r[1].substr(r[1].find('-') + 1);
    runs[{trace, policy}].push_back({100 - std::stod(r[5 + 20]), 100 - std::stod(r[5 + 26])});
  }
  std::map<std::pair<std::string, std::string>, Published> out;
  for (const auto& [key, v] : runs) {
    Published p{0, 0};
    for (const auto& [a, b] : v) p.at100 += a / v.size(), p.at130 += b / v.size();
    out[key] = p;
  }
  return out;
}

struct Stats {
  double mean = 0, sd = 0;
};

Stats MeanSd(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x / v.size();
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0;
  return s;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// Runs `job(j)` for j in [0, jobs) on `threads` threads.
void RunJobs(size_t jobs, unsigned threads, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t j; (j = next++) < jobs;) job(j);
    });
  }
  for (auto& t : pool) t.join();
}

// One replay to run: a policy, a seed and, once run, its result.
template <typename R>
struct Job {
  Policy policy;
  uint32_t seed;
  R result;
};

// A job for every policy and seed.
template <typename R>
std::vector<Job<R>> JobsFor(const std::vector<std::pair<Policy, std::string>>& policies, int seeds,
                            int first_seed) {
  std::vector<Job<R>> jobs;
  for (const auto& [policy, name] : policies)
    for (int s = 0; s < seeds; ++s) jobs.push_back({policy, static_cast<uint32_t>(first_seed + s), {}});
  return jobs;
}

// --departures: the table of ReplayDepartures for every list that has times, policy and seed.
void RunDepartures(const std::vector<TraceNode>& nodes, const std::vector<std::string>& traces,
                   const std::function<std::vector<TracePod>(const std::string&)>& load,
                   const std::vector<std::pair<Policy, std::string>>& policies, int seeds, int first_seed,
                   unsigned threads, double cluster_share) {
  std::printf(
      "openb replay with departures: seeds %d..%d, cluster %.0f %% of the list's peak GPU demand "
      "(nodes sampled per GPU model), waits in minutes\n",
      first_seed, first_seed + seeds - 1, cluster_share * 100);
  std::printf("%-11s %-18s %6s %6s %9s %9s %8s %-20s %7s %7s %7s %8s %12s\n", "trace", "policy", "GPUs",
              "peak", "alloc %", "short %", "short h", "failed c/s/1/m", "waited", "p50", "p99", "blocked",
              "plans/moves");
  for (const std::string& trace : traces) {
    const std::vector<TracePod> pods = load(trace);
    if (std::any_of(pods.begin(), pods.end(), [](const TracePod& p) { return p.created < 0; })) {
      std::printf("%-11s list has no creation and deletion times: skipped\n", trace.c_str());
      continue;
    }
    const double peak = PeakDemand(pods);
    std::vector<Job<DepartureResult>> jobs = JobsFor<DepartureResult>(policies, seeds, first_seed);
    RunJobs(jobs.size(), threads, [&](size_t j) {
      jobs[j].result = ReplayDepartures(nodes, pods, jobs[j].policy, jobs[j].seed, cluster_share * peak);
    });
    for (const auto& [policy, name] : policies) {
      double gpus = 0, alloc = 0, alloc_short = 0, short_h = 0, failed[kKinds] = {}, waited = 0, blocked = 0,
             plans = 0, moves = 0;
      std::vector<double> waits;
      for (const Job<DepartureResult>& j : jobs) {
        if (j.policy != policy) continue;
        const DepartureResult& r = j.result;
        gpus += r.cluster_gpus / seeds;
        alloc += r.allocated / seeds;
        alloc_short += r.allocated_short / seeds;
        short_h += r.short_hours / seeds;
        for (int k = 0; k < kKinds; ++k) failed[k] += static_cast<double>(r.failed[k]) / seeds;
        waited += static_cast<double>(r.waits_s.size()) / seeds;
        for (double w : r.waits_s) waits.push_back(w / 60);
        blocked += static_cast<double>(r.blocked) / seeds;
        plans += static_cast<double>(r.plans) / seeds;
        moves += static_cast<double>(r.moves) / seeds;
      }
      char kinds[64], defrag[32];
      std::snprintf(kinds, sizeof kinds, "%.0f/%.0f/%.0f/%.0f", failed[kCpuOnly], failed[kShare],
                    failed[kOneGpu], failed[kMultiGpu]);
      std::snprintf(defrag, sizeof defrag, "%.0f/%.0f", plans, moves);
      std::printf("%-11s %-18s %6.0f %6.0f %9.2f %9.2f %8.1f %-20s %7.0f %7.1f %7.1f %8.0f %12s\n",
                  trace.c_str(), name.c_str(), gpus, peak, alloc, alloc_short, short_h, kinds, waited,
                  Percentile(waits, 0.5), Percentile(waits, 0.99), blocked,
                  policy == Policy::kDefrag ? defrag : "-");
      std::fflush(stdout);
    }
  }
}

// --export: the cluster and every seed's arrivals of every trace, as files (the usage at the top says which).
int Export(const std::string& out, const std::vector<TraceNode>& nodes,
           const std::vector<std::string>& traces,
           const std::function<std::vector<TracePod>(const std::string&)>& load, int seeds, int first_seed,
           size_t limit) {
  const auto open = [](const std::string& path) {
    std::ofstream file(path);
    if (!file) std::cerr << "cannot write " << path << "\n";
    return file;
  };
  std::ofstream cluster = open(out + "/nodes.csv");
  if (!cluster) return 1;
  cluster << "name,cpu_milli,memory_mib,cards,model,card_mib\n";
  double total_gpus = 0;
  for (const TraceNode& n : nodes) {
    cluster << n.name << ',' << n.cpu_milli << ',' << n.memory_mib << ',' << n.gpus << ',' << n.model << ','
            << ModelMemoryMiB(n.model) << '\n';
    total_gpus += n.gpus;
  }
  static const char* const kKindNames[kKinds] = {"cpu", "share", "one", "multi"};
  for (const std::string& trace : traces) {
    const std::vector<TracePod> sorted = load(trace);
    for (int s = 0; s < seeds; ++s) {
      const uint32_t seed = static_cast<uint32_t>(first_seed + s);
      std::mt19937_64 rng(seed);
      std::ofstream file = open(out + "/" + trace + "-" + std::to_string(seed) + ".csv");
      if (!file) return 1;
      file << "index,trace_pod,kind,cpu_milli,memory_mib,cards,core,models\n";
      size_t index = 0;
      for (const TracePod& p : Arrivals(sorted, total_gpus, rng, limit)) {
        const PodRequest req = RequestOf(p);
        std::string models;
        for (const std::string& m : req.gpu_models) models += (models.empty() ? "" : "|") + m;
        file << index++ << ',' << p.name << ',' << kKindNames[KindOf(p)] << ',' << p.cpu_milli << ','
             << p.memory_mib << ',' << p.num_gpu << ',' << (req.AsksForGpu() ? req.containers[0].core : 0)
             << ',' << models << '\n';
      }
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::string dir = std::string(MGPU_TRACES_DIR) + "/openb";
  std::vector<std::string> traces = {"default",    "cpu100",     "cpu200",    "gpushare40", "gpushare80",
                                     "multigpu20", "multigpu40", "gpuspec10", "gpuspec20"};
  std::vector<std::pair<Policy, std::string>> policies = kPolicies;
  int seeds = 10;
  int first_seed = 42;
  uint32_t gen_seed = 1;
  size_t limit = 0;
  std::string scheduler_config = MGPU_SCHEDULER_CONFIG;
  std::string gpu_profile;
  bool departures = false;
  std::string export_dir;
  double cluster_share = 0.5;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--departures") {
      departures = true;
      continue;
    }
    if (arg == "--export")
      export_dir = value;
    else if (arg == "--cluster-share")
      cluster_share = std::stod(value);
    else if (arg == "--trace-dir")
      dir = value;
    else if (arg == "--traces")
      traces = Split(value, ',');
    else if (arg == "--seeds")
      seeds = std::stoi(value);
    else if (arg == "--first-seed")
      first_seed = std::stoi(value);
    else if (arg == "--gen-seed")
      gen_seed = static_cast<uint32_t>(std::stoul(value));
    else if (arg == "--limit")
      limit = std::stoul(value);
    else if (arg == "--scheduler-config")
      scheduler_config = value;
    else if (arg == "--gpu-profile")
      gpu_profile = value;
    else if (arg == "--threads")
      threads = static_cast<unsigned>(std::stoi(value));
    else if (arg == "--policies") {
      policies.clear();
      for (const auto& name : Split(value, ',')) {
        for (const auto& p : kPolicies) {
          std::string lower = p.second;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          if (lower == name || lower == "mgpu-" + name) policies.push_back(p);
        }
      }
    } else {
      std::cerr
          << "usage: mgpu_trace_replay [--traces a,b] [--policies as-shipped,random,bestfit,packing,binpack,"
             "spread,fragmentation,dra-firstfit,dra-fullest-first,dra-kube,offline,offline-arrival,defrag] "
             "[--seeds N] [--first-seed S] [--gen-seed S] [--trace-dir DIR] [--threads N] [--limit PODS] "
             "[--scheduler-config FILE [--gpu-profile NAME]] "
             "[--departures [--cluster-share F]] [--export DIR]\n";
      return 2;
    }
    ++i;
  }
  const auto nodes = LoadNodes(dir);
  const auto load = [&](const std::string& trace) {
    return trace.rfind("gen-", 0) == 0 ? GenerateList(dir, trace, gen_seed)
                                       : LoadPods(dir + "/openb_pod_list_" + trace + ".csv");
  };
  if (!export_dir.empty()) return Export(export_dir, nodes, traces, load, seeds, first_seed, limit);
  if (departures) {
    std::erase_if(policies, [](const auto& p) {
      return p.first == Policy::kOffline || p.first == Policy::kOfflineArrival ||
             p.first == Policy::kAsShipped;
    });
    RunDepartures(nodes, traces, load, policies, seeds, first_seed, threads, cluster_share);
    return 0;
  }
  std::erase_if(policies, [](const auto& p) { return p.first == Policy::kDefrag; });
  Result<KubeSchedulerModel> kube = LoadKubeSchedulerModel(scheduler_config);
  if (!kube.ok()) {
    std::cerr << kube.message() << "\n";
    return 2;
  }
  if (!gpu_profile.empty()) {
    Result<int32_t> percentage = kube->PercentageOf(gpu_profile);
    if (!percentage.ok()) {
      std::cerr << percentage.message() << "\n";
      return 2;
    }
    kube->gpu_pod_percentage = *percentage;
    std::printf("mgpu-as-shipped: GPU pods in profile %s (percentageOfNodesToScore %d: %d of %zu nodes)\n",
                gpu_profile.c_str(), *percentage,
                KubeSchedulerModel::NumFeasibleNodesToFind(static_cast<int32_t>(nodes.size()), *percentage),
                nodes.size());
  }
  const auto published = LoadPublished(dir);
  std::printf("openb trace replay: %zu nodes, seeds %d..%d, gpu_milli rounded to whole mgpu-core percent\n",
              nodes.size(), first_seed, first_seed + seeds - 1);
  std::printf("mgpu-as-shipped: %s (percentageOfNodesToScore %d: %d of %zu nodes sampled)\n",
              scheduler_config.c_str(), kube->percentage_of_nodes_to_score,
              kube->NumFeasibleNodesToFind(static_cast<int32_t>(nodes.size())), nodes.size());
  std::printf("%-11s %-18s %16s %16s %9s %9s  %-20s %9s  %-20s %9s %8s %8s\n", "trace", "policy",
              "unalloc@100 %", "unalloc@130 %", "paper@100", "FGD@100", "failed@100 c/s/1/m", "cpu@100 %",
              "failed@130 c/s/1/m", "cpu@130 %", "p50 us", "p99 us");
  for (const std::string& trace : traces) {
    const auto pods = load(trace);
    std::vector<Job<RunResult>> jobs = JobsFor<RunResult>(policies, seeds, first_seed);
    RunJobs(jobs.size(), threads, [&](size_t j) {
      jobs[j].result = Replay(nodes, pods, jobs[j].policy, jobs[j].seed, limit, *kube);
    });
    double mgpu_at100 = NAN, offline_at100 = NAN;
    for (const auto& [policy, name] : policies) {
      std::vector<double> at100, at130, times;
      double failed[kKinds] = {}, failed_at100[kKinds] = {}, cpu_unplaced_at100 = 0, cpu_unplaced = 0;
      for (const Job<RunResult>& j : jobs) {
        if (j.policy != policy) continue;
        at100.push_back(100 - j.result.allocated[kMark100]);
        at130.push_back(100 - j.result.allocated[kMark130]);
        for (int k = 0; k < kKinds; ++k) {
          failed[k] += static_cast<double>(j.result.failed[k]) / seeds;
          failed_at100[k] += static_cast<double>(j.result.failed_at100[k]) / seeds;
        }
        cpu_unplaced_at100 += j.result.cpu_unplaced_at100 / seeds;
        cpu_unplaced += j.result.cpu_unplaced / seeds;
        times.insert(times.end(), j.result.decision_us.begin(), j.result.decision_us.end());
      }
      const Stats s100 = MeanSd(at100), s130 = MeanSd(at130);
      if (policy == Policy::kFragmentation) mgpu_at100 = s100.mean;
      if (policy == Policy::kOffline) offline_at100 = s100.mean;
      auto fgd = published.find({trace, "FGD"});
      auto pub = published.find({trace, name == "Packing" ? "GpuPacking" : name});
      const auto kinds = [](const double(&f)[kKinds]) {
        char text[64];
        std::snprintf(text, sizeof text, "%.0f/%.0f/%.0f/%.0f", f[kCpuOnly], f[kShare], f[kOneGpu],
                      f[kMultiGpu]);
        return std::string(text);
      };
      const auto us = [&](double q) {
        char text[32] = "-";
        if (!times.empty()) std::snprintf(text, sizeof text, "%.1f", Percentile(times, q));
        return std::string(text);
      };
      std::printf("%-11s %-18s %7.2f ± %5.2f  %7.2f ± %5.2f  %9s %9s  %-20s %9.2f  %-20s %9.2f %8s %8s\n",
                  trace.c_str(), name.c_str(), s100.mean, s100.sd, s130.mean, s130.sd,
                  pub == published.end() ? "-" : std::to_string(pub->second.at100).substr(0, 5).c_str(),
                  fgd == published.end() ? "-" : std::to_string(fgd->second.at100).substr(0, 5).c_str(),
                  kinds(failed_at100).c_str(), cpu_unplaced_at100, kinds(failed).c_str(), cpu_unplaced,
                  us(0.5).c_str(), us(0.99).c_str());
      // With --limit: each seed at the end of its prefix (the last mark holds the allocation then).
      for (const Job<RunResult>& j : jobs) {
        if (limit == 0 || j.policy != policy) continue;
        std::printf("%-11s %-18s seed %u after %zu pods: unallocated %.2f %%, failed c/s/1/m %d/%d/%d/%d\n",
                    trace.c_str(), name.c_str(), j.seed, limit, 100 - j.result.allocated[kThresholds - 1],
                    j.result.failed[kCpuOnly], j.result.failed[kShare], j.result.failed[kOneGpu],
                    j.result.failed[kMultiGpu]);
      }
      std::fflush(stdout);
    }
    if (!std::isnan(mgpu_at100) && !std::isnan(offline_at100))
      std::printf("%-11s gap to the offline reference at 100 %%: %.2f points\n", trace.c_str(),
                  mgpu_at100 - offline_at100);
  }
  return 0;
}

}  // namespace
}  // namespace mgpu::bench

int main(int argc, char** argv) { return mgpu::bench::Main(argc, argv); }
