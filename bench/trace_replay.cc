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
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/allocator.h"
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
  std::vector<std::string> models;  // allowed; empty = any
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
  kOfflineArrival
};
const std::vector<std::pair<Policy, std::string>> kPolicies = {
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
    {Policy::kOfflineArrival, "Offline-arrival"}};

// Pod kinds for the failure breakdown.
enum Kind { kCpuOnly, kShare, kOneGpu, kMultiGpu, kKinds };

Kind KindOf(const TracePod& p) {
  if (p.num_gpu == 0) return kCpuOnly;
  if (p.num_gpu == 1 && p.gpu_milli < 1000) return kShare;
  return p.num_gpu == 1 ? kOneGpu : kMultiGpu;
}

struct SimNode {
  const TraceNode* trace;
  NodeState gpu;
  int64_t cpu_left, memory_left;
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
  std::map<std::string, double, std::less<>> free_core;
  for (const SimNode& n : nodes) free_core[n.gpu.product] += 100.0 * n.trace->gpus;
  Packed out;
  Placement placed;
  double allocated = 0;
  for (const TracePod& p : pods) {
    PodRequest req = RequestOf(p);
    req.card_policy = CardPolicy::kFragmentation;
    workload.SetClusterFree(free_core);
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
    free_core[pick->gpu.product] -= 100.0 * GpusOf(p);
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
  return out;
}

RunResult Replay(const std::vector<TraceNode>& trace_nodes, const std::vector<TracePod>& sorted,
                 Policy policy, uint32_t seed, size_t limit) {
  if (policy == Policy::kOffline || policy == Policy::kOfflineArrival)
    return ReplayOffline(trace_nodes, sorted, seed, limit, policy == Policy::kOfflineArrival);
  double total_gpus = 0, total_cpu = 0;
  for (const auto& n : trace_nodes) total_gpus += n.gpus, total_cpu += static_cast<double>(n.cpu_milli);
  std::mt19937_64 rng(seed);
  const std::vector<TracePod> pods = Arrivals(sorted, total_gpus, rng, limit);
  std::vector<SimNode> nodes = EmptyCluster(trace_nodes);

  RunResult out;
  Recorder record(total_gpus, total_cpu);
  std::vector<double>& decision_us = record.result().decision_us;
  decision_us.reserve(pods.size());
  const bool dra =
      policy == Policy::kDraFirstFit || policy == Policy::kDraFullestFirst || policy == Policy::kDraKube;
  const bool mgpu_policy = policy == Policy::kBinpack || policy == Policy::kSpread ||
                           policy == Policy::kFragmentation || (dra && policy != Policy::kDraKube);
  NodePolicy node_policy = NodePolicy::kBinpack;
  if (policy == Policy::kSpread) node_policy = NodePolicy::kSpread;
  if (policy == Policy::kFragmentation || dra) node_policy = NodePolicy::kFragmentation;
  // The extender's model: it learns every GPU pod it is asked to filter and publishes the model every 16 of
  // them, with the free core per GPU model its cache sums at that moment (kept here as pods bind).
  ModelPublisher publisher;
  std::vector<size_t> feasible, best;
  std::vector<int64_t> scores;
  std::vector<NodeState*> candidates;  // mgpu policies: the nodes whose CPU, memory and GPU model fit
  Placement placed;
  FreeCoreByProduct free_core;
  for (const SimNode& n : nodes) free_core[n.gpu.product] += 100.0 * n.trace->gpus;
  const auto cluster_free = [&free_core] { return free_core; };
  // Equal top scores: kube-scheduler, which ranks the extender's scores, picks one at random.
  const auto random_pick = [&rng](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  for (const TracePod& p : pods) {
    PodRequest req = RequestOf(p);
    req.node_policy = node_policy;
    if (policy == Policy::kFragmentation || dra) req.card_policy = CardPolicy::kFragmentation;
    const auto start = std::chrono::steady_clock::now();
    size_t pick = SIZE_MAX;
    // DRA: the node is chosen (by mgpu's prioritize, or kube-scheduler's own scores for dra-kube), then
    // kube-scheduler's allocator takes the first cards there that fit, in the order the driver lists them.
    const auto bind_first_fit = [&](size_t i) {
      SimNode& n = nodes[i];
      Result<Assignment> cards =
          req.AsksForGpu() ? FirstFitCards(n.gpu, req, DeviceOrder(n.gpu, policy == Policy::kDraFullestFirst))
                           : Result<Assignment>(Assignment{});
      if (!cards.ok()) return false;  // no first fit where mgpu's own choice fits (not seen on openb)
      if (req.AsksForGpu()) free_core[n.gpu.product] -= 100.0 * GpusOf(p);
      Bind(n, p, req, cards);
      return true;
    };
    if (mgpu_policy) {
      // The extender's own cycle (common/scheduler.h) over the nodes kube-scheduler's filters leave; CPU-only
      // pods reach the extender too when its managedResources are left empty, and always fit.
      feasible.clear();
      candidates.clear();
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!HostFits(nodes[i], p)) continue;
        feasible.push_back(i);
        candidates.push_back(&nodes[i].gpu);
      }
      if (dra) {
        // The extender's filter and prioritize only: its decisions and scores pick the node.
        const ModelPublisher::Published model = publisher.Observe(req, cluster_free);
        std::vector<NodeDecision> decisions;
        decisions.reserve(candidates.size());
        for (const NodeState* node : candidates)
          decisions.push_back(Decide(*node, req, model.model.get(), /*with_reason=*/false, placed));
        const std::vector<int> extender = Scores(decisions);
        best.clear();
        int best_score = -1;
        for (size_t k = 0; k < candidates.size(); ++k) {
          if (!decisions[k].fits || extender[k] < best_score) continue;
          if (extender[k] > best_score) best.clear();
          best_score = extender[k];
          best.push_back(feasible[k]);
        }
        if (!best.empty()) pick = best[random_pick(best.size())];
        if (pick != SIZE_MAX && !bind_first_fit(pick)) pick = SIZE_MAX;
      } else {
        Result<Scheduled> scheduled = ScheduleOne(candidates, req, publisher, cluster_free,
                                                  /*with_reasons=*/false, random_pick, placed);
        if (!scheduled.ok()) {
          std::cerr << "internal error: chosen node cannot take the pod: " << scheduled.message() << "\n";
          std::exit(1);
        }
        if (scheduled->node != Scheduled::kNowhere) {
          pick = feasible[scheduled->node];
          SimNode& n = nodes[pick];
          if (req.AsksForGpu()) free_core[n.gpu.product] -= 100.0 * GpusOf(p);
          BindHost(n, p);
        }
      }
    } else {
      const ModelPublisher::Published model = publisher.Observe(req, cluster_free);
      const WorkloadModel* workload = model.model.get();
      feasible.clear();
      scores.clear();
      for (size_t i = 0; i < nodes.size(); ++i) {
        SimNode& n = nodes[i];
        if (!HostFits(n, p) || !Place(n.gpu, req, workload, placed)) continue;
        int64_t score = 0;
        if (policy == Policy::kBestFit) score = BestFitScore(n, p, req);
        if (policy == Policy::kPacking) score = PackingScore(n, req);
        if (policy == Policy::kDraKube) score = KubeDefaultScore(n, p);
        scores.push_back(score);
        feasible.push_back(i);
      }
      best.clear();
      int64_t best_score = INT64_MIN;
      for (size_t k = 0; k < feasible.size(); ++k) {
        if (scores[k] > best_score) {
          best_score = scores[k];
          best.assign(1, feasible[k]);
        } else if (scores[k] == best_score) {
          best.push_back(feasible[k]);
        }
      }
      // Equal top scores: the paper's simulator takes the first node in name order (its baselines only
      // reproduce that way); kube-scheduler picks one at random. Random scores all alike.
      const bool random_tie = policy == Policy::kRandom || dra;
      if (!best.empty()) pick = random_tie ? best[random_pick(best.size())] : best[0];
      if (pick != SIZE_MAX && dra) {
        if (!bind_first_fit(pick)) pick = SIZE_MAX;
      } else if (pick != SIZE_MAX) {
        SimNode& n = nodes[pick];
        Result<Assignment> cards = Assignment{};
        if (req.AsksForGpu()) {
          cards = policy == Policy::kRandom ? RandomCard(n.gpu, req, rng) : ChooseCards(n.gpu, req, workload);
          free_core[n.gpu.product] -= 100.0 * GpusOf(p);
        }
        Bind(n, p, req, cards);
      }
    }
    decision_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    record.Arrived(p, pick != SIZE_MAX);
  }
  return std::move(record.Finish());
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

int Main(int argc, char** argv) {
  std::string dir = std::string(MGPU_TRACES_DIR) + "/openb";
  std::vector<std::string> traces = {"default",    "cpu100",     "cpu200",    "gpushare40", "gpushare80",
                                     "multigpu20", "multigpu40", "gpuspec10", "gpuspec20"};
  std::vector<std::pair<Policy, std::string>> policies = kPolicies;
  int seeds = 10;
  int first_seed = 42;
  size_t limit = 0;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--trace-dir")
      dir = value;
    else if (arg == "--traces")
      traces = Split(value, ',');
    else if (arg == "--seeds")
      seeds = std::stoi(value);
    else if (arg == "--first-seed")
      first_seed = std::stoi(value);
    else if (arg == "--limit")
      limit = std::stoul(value);
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
          << "usage: mgpu_trace_replay [--traces a,b] [--policies random,bestfit,packing,binpack,spread,"
             "fragmentation,dra-firstfit,dra-fullest-first,dra-kube,offline,offline-arrival] "
             "[--seeds N] [--first-seed S] [--trace-dir DIR] [--threads N] [--limit PODS]\n";
      return 2;
    }
    ++i;
  }
  const auto nodes = LoadNodes(dir);
  const auto published = LoadPublished(dir);
  std::printf("openb trace replay: %zu nodes, seeds %d..%d, gpu_milli rounded to whole mgpu-core percent\n",
              nodes.size(), first_seed, first_seed + seeds - 1);
  std::printf("%-11s %-18s %16s %16s %9s %9s  %-20s %9s  %-20s %8s %8s\n", "trace", "policy", "unalloc@100 %",
              "unalloc@130 %", "paper@100", "FGD@100", "failed@100 c/s/1/m", "cpu@100 %",
              "failed@130 c/s/1/m", "p50 us", "p99 us");
  for (const std::string& trace : traces) {
    const auto pods = LoadPods(dir + "/openb_pod_list_" + trace + ".csv");
    struct Job {
      Policy policy;
      uint32_t seed;
      RunResult result;
    };
    std::vector<Job> jobs;
    for (const auto& [policy, name] : policies) {
      for (int s = 0; s < seeds; ++s) jobs.push_back({policy, static_cast<uint32_t>(first_seed + s), {}});
    }
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (size_t j; (j = next++) < jobs.size();)
          jobs[j].result = Replay(nodes, pods, jobs[j].policy, jobs[j].seed, limit);
      });
    }
    for (auto& t : pool) t.join();
    double mgpu_at100 = NAN, offline_at100 = NAN;
    for (const auto& [policy, name] : policies) {
      std::vector<double> at100, at130, times;
      double failed[kKinds] = {}, failed_at100[kKinds] = {}, cpu_unplaced = 0;
      for (const Job& j : jobs) {
        if (j.policy != policy) continue;
        at100.push_back(100 - j.result.allocated[kMark100]);
        at130.push_back(100 - j.result.allocated[kMark130]);
        for (int k = 0; k < kKinds; ++k) {
          failed[k] += static_cast<double>(j.result.failed[k]) / seeds;
          failed_at100[k] += static_cast<double>(j.result.failed_at100[k]) / seeds;
        }
        cpu_unplaced += j.result.cpu_unplaced_at100 / seeds;
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
      std::printf("%-11s %-18s %7.2f ± %5.2f  %7.2f ± %5.2f  %9s %9s  %-20s %9.2f  %-20s %8s %8s\n",
                  trace.c_str(), name.c_str(), s100.mean, s100.sd, s130.mean, s130.sd,
                  pub == published.end() ? "-" : std::to_string(pub->second.at100).substr(0, 5).c_str(),
                  fgd == published.end() ? "-" : std::to_string(fgd->second.at100).substr(0, 5).c_str(),
                  kinds(failed_at100).c_str(), cpu_unplaced, kinds(failed).c_str(), us(0.5).c_str(),
                  us(0.99).c_str());
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
