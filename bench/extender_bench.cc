// The extender's per-request cost on a synthetic cluster (DESIGN §9): 1,000 and 5,000 nodes × 8 cards of
// 80 GiB, partly used by existing pods (mostly allocated, some assigned and still in flight). Measured from
// the raw request body, as the HTTP handler runs it:
//  - Filter / Prioritize, cache mode (`NodeNames`) and full-`Nodes` mode (~5 KB Node objects): Parse + verb +
//    encode the reply.
//  - Bind: BindArgs::Parse + Extender::Bind + encode, with a real API client against the in-process fake API
//    server on loopback (GET pod, PATCH the assignment, POST the Binding, POST an Event, cache reservation);
//    real time, so the API round trips count. BindReserve is bind's in-process part alone (choose + reserve +
//    rollback, no API calls).
//  - The JSON parse floor of the full-`Nodes` filter body: simdjson on demand (walk to the end, count items),
//    simdjson DOM, nlohmann DOM; and ExtenderArgs::Parse alone.
// Run: build/bench/mgpu_extender_bench [--benchmark_filter=nodes:1000] [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/allocator.h"
#include "common/clock.h"
#include "common/cluster_cache.h"
#include "common/codec.h"
#include "common/fragmentation.h"
#include "common/kube/client.h"
#include "common/node_facts.h"
#include "common/pod_facts.h"
#include "common/request.h"
#include "extender/extender.h"
#include "extender/metrics.h"
#include "extender/server.h"
#include "extender/wire.h"
#include "testing/fake_apiserver.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;

constexpr int kCardsPerNode = 8;
constexpr int64_t kCardMemoryMiB = 81920;
constexpr int kPodCore = 30;  // the scheduled pod: 30% of one card, 4096 MiB
constexpr int64_t kPodMemoryMiB = 4096;
constexpr size_t kBindBatch = 64;  // pending pods created (untimed) at a time for the bind benchmark

Config BenchConfig() {
  Config config;
  // The in-flight existing pods must not expire halfway through a run.
  config.extender.assignment_ttl_seconds = 24 * 3600;
  return config;
}

std::string NodeName(int i) {
  char name[32];
  std::snprintf(name, sizeof name, "gpu-node-%05d", i);
  return name;
}

// A Node as the API server sends it (~5 KB): labels, annotations with the inventory, capacity, conditions,
// images, addresses, nodeInfo.
json NodeObject(int index, const NodeInventory& inventory, const ResourceNames& names) {
  const std::string name = NodeName(index);
  const std::string ip = "10.20." + std::to_string(index / 250) + "." + std::to_string(index % 250 + 2);
  const std::string gpu_core = std::to_string(100 * kCardsPerNode);
  const std::string gpu_memory = std::to_string(kCardMemoryMiB * kCardsPerNode);
  const json resources = {{"cpu", "128"},
                          {"memory", "2113442412Ki"},
                          {"pods", "110"},
                          {"ephemeral-storage", "3748905484Ki"},
                          {"hugepages-1Gi", "0"},
                          {"hugepages-2Mi", "0"},
                          {names.core, gpu_core},
                          {names.memory, gpu_memory},
                          {names.reclaimed_core, gpu_core}};
  json conditions = json::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure"}) {
    conditions.push_back({{"type", type},
                          {"status", "False"},
                          {"lastHeartbeatTime", "2025-03-14T09:26:53Z"},
                          {"lastTransitionTime", "2025-01-02T11:04:20Z"},
                          {"reason", std::string("KubeletHasNo") + type},
                          {"message", "kubelet has no " + std::string(type)}});
  }
  conditions.push_back({{"type", "Ready"},
                        {"status", "True"},
                        {"lastHeartbeatTime", "2025-03-14T09:26:53Z"},
                        {"lastTransitionTime", "2025-01-02T11:05:01Z"},
                        {"reason", "KubeletReady"},
                        {"message", "kubelet is posting ready status"}});
  json images = json::array();
  const char* repos[] = {"nvcr.io/nvidia/pytorch",          "nvcr.io/nvidia/tritonserver",
                         "registry.example.com/ml/bert",    "registry.example.com/ml/llama-serving",
                         "docker.io/library/python",        "registry.k8s.io/kube-proxy",
                         "ghcr.io/mgpu/mgpu-device-plugin", "registry.k8s.io/pause"};
  int64_t size = 734003200;
  for (const char* repo : repos) {
    images.push_back(
        {{"names",
          {std::string(repo) + "@sha256:5f0c1a9e8d7b6c4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a",
           std::string(repo) + ":24.01-py3"}},
         {"sizeBytes", size}});
    size = size * 7 / 5 + 1234567;
  }
  return {
      {"kind", "Node"},
      {"apiVersion", "v1"},
      {"metadata",
       {{"name", name},
        {"uid", "6b2e6f4c-0d1a-4c3e-9f7b-" + std::to_string(100000000000 + index)},
        {"resourceVersion", std::to_string(48123000 + index)},
        {"creationTimestamp", "2025-01-02T11:03:58Z"},
        {"labels",
         {{"beta.kubernetes.io/arch", "amd64"},
          {"beta.kubernetes.io/os", "linux"},
          {"kubernetes.io/arch", "amd64"},
          {"kubernetes.io/hostname", name},
          {"kubernetes.io/os", "linux"},
          {"node.kubernetes.io/instance-type", "gpu.8xa100-80g"},
          {"topology.kubernetes.io/region", "eu-west-1"},
          {"topology.kubernetes.io/zone", "eu-west-1" + std::string(1, static_cast<char>('a' + index % 3))},
          {"nvidia.com/gpu.present", "true"},
          {names.label_product, inventory.cards.front().model},
          {names.label_count, std::to_string(kCardsPerNode)},
          {names.label_memory, std::to_string(kCardMemoryMiB)}}},
        {"annotations",
         {{names.gpu_inventory, EncodeInventory(inventory)},
          {"node.alpha.kubernetes.io/ttl", "0"},
          {"volumes.kubernetes.io/controller-managed-attach-detach", "true"},
          {"csi.volume.kubernetes.io/nodeid", R"({"ebs.csi.aws.com":"i-0)" + std::to_string(index) + R"("})"},
          {"kubeadm.alpha.kubernetes.io/cri-socket", "unix:///run/containerd/containerd.sock"},
          {"projectcalico.org/IPv4Address", ip + "/16"}}}}},
      {"spec",
       {{"podCIDR", "10.244." + std::to_string(index % 256) + ".0/24"},
        {"podCIDRs", {"10.244." + std::to_string(index % 256) + ".0/24"}},
        {"providerID", "aws:///eu-west-1a/i-0" + std::to_string(index)},
        {"taints", {{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}}}}}},
      {"status",
       {{"capacity", resources},
        {"allocatable", resources},
        {"conditions", conditions},
        {"addresses",
         {{{"type", "InternalIP"}, {"address", ip}},
          {{"type", "Hostname"}, {"address", name}},
          {{"type", "InternalDNS"}, {"address", name + ".eu-west-1.compute.internal"}}}},
        {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
        {"nodeInfo",
         {{"machineID", "ec2a7d5f1b9e4c6d8a3f2b1c0d9e8f7a"},
          {"systemUUID", "ec2a7d5f-1b9e-4c6d-8a3f-2b1c0d9e8f7a"},
          {"bootID", "0f6a1c2d-3e4b-5a6c-7d8e-9f0a1b2c3d4e"},
          {"kernelVersion", "5.15.0-1051-aws"},
          {"osImage", "Ubuntu 22.04.4 LTS"},
          {"containerRuntimeVersion", "containerd://1.7.13"},
          {"kubeletVersion", "v1.32.2"},
          {"kubeProxyVersion", "v1.32.2"},
          {"operatingSystem", "linux"},
          {"architecture", "amd64"}}},
        {"images", images}}}};
}

// A pod with one GPU container "main". Offline pods ask for reclaimed core; `cards` > 1 spreads over cards.
json PodObject(const std::string& name, bool offline, int core, int64_t memory_mib, int cards,
               const ResourceNames& names) {
  json annotations = json::object();
  json limits = {{"cpu", "8"}, {"memory", "32Gi"}, {names.memory, std::to_string(memory_mib)}};
  if (offline) {
    annotations[std::string(kQosLevelAnnotation)] = "reclaimed_cores";
    limits[names.reclaimed_core] = std::to_string(core);
  } else {
    annotations[std::string(kQosLevelAnnotation)] = "shared_cores";
    limits[names.core] = std::to_string(core);
  }
  if (cards > 1) annotations[names.gpu_count] = std::to_string(cards);
  json requests = limits;
  requests["cpu"] = "4";
  requests["memory"] = "16Gi";
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", "uid-" + name},
            {"labels", {{"app", "inference"}, {"team", "ml"}}},
            {"annotations", annotations}}},
          {"spec",
           {{"schedulerName", "default-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"image", "registry.example.com/ml/llama-serving:24.01-py3"},
               {"resources", {{"limits", limits}, {"requests", requests}}}}}}}},
          {"status", {{"phase", "Pending"}, {"qosClass", "Burstable"}}}};
}

// Existing pods on one node: a 2-card pod on some nodes, then per card empty, full, or shared by 1–3 online
// pods and maybe an offline one. 90% allocated, 10% assigned and in flight (none the scheduled pod's size,
// so the bind's ambiguity guard never waits on them).
std::vector<json> ExistingPods(int index, const NodeInventory& inventory, const ResourceNames& names,
                               int64_t now_ns) {
  std::mt19937 rng(static_cast<uint32_t>(index) * 2654435761u + 17);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const int cores[] = {10, 20, 25, 40, 50};
  const int64_t memories[] = {2048, 6144, 8192, 12288, 16384, 20480};
  std::vector<json> pods;
  int serial = 0;
  auto place = [&](bool offline, int core, int64_t memory_mib, std::vector<int> cards) {
    const std::string name = NodeName(index) + "-pod" + std::to_string(serial++);
    json pod = PodObject(name, offline, core, memory_mib, static_cast<int>(cards.size()), names);
    ContainerAssignment container{"main", {}};
    const int n = static_cast<int>(cards.size());
    for (int c : cards) {
      container.cards.push_back(
          CardShare{inventory.cards[c].uuid, offline ? 0 : core / n, offline ? core : 0, memory_mib / n});
    }
    const bool in_flight = pick(10) == 0;
    pod["spec"]["nodeName"] = NodeName(index);
    pod["status"]["phase"] = in_flight ? "Pending" : "Running";
    auto& annotations = pod["metadata"]["annotations"];
    annotations[in_flight ? names.gpu_assignment : names.gpu_allocated] =
        EncodeAssignment(Assignment{{container}});
    annotations[names.gpu_assume_time] = EncodeAssumeTime(now_ns - 1'000'000'000LL * (1 + pick(60)));
    pods.push_back(std::move(pod));
  };
  int first_free = 0;
  if (pick(10) == 0) {
    place(false, 200, 2 * 40960, {0, 1});
    first_free = 2;
  }
  for (int c = first_free; c < kCardsPerNode; ++c) {
    const int kind = pick(100);
    if (kind < 25) continue;  // empty
    if (kind < 40) {          // one pod takes the whole card's core
      place(false, 100, 61440 + 2048 * pick(8), {c});
      continue;
    }
    int core = 0;
    int64_t memory = 0;
    for (int k = 1 + pick(3); k > 0; --k) {
      const int pod_core = cores[pick(5)];
      const int64_t pod_memory = memories[pick(6)];
      if (core + pod_core > 100 || memory + pod_memory > kCardMemoryMiB) break;
      place(false, pod_core, pod_memory, {c});
      core += pod_core;
      memory += pod_memory;
    }
    if (pick(10) < 3 && memory + 8192 <= kCardMemoryMiB) place(true, 20 + 10 * pick(4), 8192, {c});
  }
  return pods;
}

// One synthetic cluster with its cache, verbs, fake API server and request bodies, built once per size.
struct Cluster {
  explicit Cluster(int node_count);

  Config config = BenchConfig();
  ResourceNames names = config.Names();
  ClusterCache cache{config};
  Metrics metrics;
  testing::FakeApiServer api;
  std::unique_ptr<kube::Client> client;
  std::unique_ptr<Extender> extender;

  int nodes = 0;
  int existing_pods = 0;
  json pod;                         // the pod being scheduled
  std::string filter_cache_body;    // all nodes
  std::string filter_blocked_body;  // all nodes, a pod of 8 whole cards: fits none, fragmentation (defrag.h)
  std::string filter_full_body;
  std::string prioritize_cache_body;  // the nodes that passed the filter
  std::string prioritize_full_body;
  size_t passed = 0;

  // Bind: nodes in round-robin rounds, each as often as another pod of this size fits on it.
  std::vector<std::string> bind_targets;
  size_t next_target = 0;
  int next_bind_pod = 0;
  std::vector<std::string> pending_bodies;  // BindArgs bodies of pods created on the fake API server
  size_t next_pending = 0;
  std::vector<std::string> in_flight;  // bound pods the cache has not seen from the "watch" yet
  std::string setup_error;

  // The real HTTP server over this cluster's extender on loopback, started by the first HTTP benchmark.
  std::once_flag http_once;
  std::unique_ptr<HttpServer> http;

  void RefillBindPods();
  int HttpPort();
};

int Cluster::HttpPort() {
  std::call_once(http_once, [this] {
    http = std::make_unique<HttpServer>(*extender, cache, metrics, [] { return true; });
    if (Status s = http->Start("127.0.0.1:0", config.extender); !s.ok()) setup_error = s.message();
  });
  return setup_error.empty() ? http->port() : 0;
}

// The process's resident memory in MiB (VmRSS).
double ResidentMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

std::string NodesBody(const json& pod, const std::vector<std::string>& items) {
  std::string body =
      R"({"Pod":)" + pod.dump() + R"(,"Nodes":{"metadata":{"resourceVersion":"48200000"},"items":[)";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) body += ',';
    body += items[i];
  }
  body += "]},\"NodeNames\":null}";
  return body;
}

std::string NamesBody(const json& pod, const std::vector<std::string>& names) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}

Cluster::Cluster(int node_count) : nodes(node_count) {
  const int64_t now_ns = UnixNowNs();
  std::vector<std::string> node_names, node_items;
  for (int i = 0; i < node_count; ++i) {
    NodeInventory inventory;
    inventory.memory_unit_mib = config.memory_unit_mib;
    inventory.version = "0.1.0";
    inventory.heartbeat = now_ns / 1'000'000'000;
    for (int c = 0; c < kCardsPerNode; ++c) {
      inventory.cards.push_back(Card{c, "GPU-" + std::to_string(10000000 + i * kCardsPerNode + c) + "-a100",
                                     "NVIDIA A100-SXM4-80GB", kCardMemoryMiB, true});
    }
    const json node = NodeObject(i, inventory, names);
    cache.UpsertNode(ReadNode(node, config));
    node_names.push_back(NodeName(i));
    node_items.push_back(node.dump());
    for (const json& p : ExistingPods(i, inventory, names, now_ns)) {
      cache.UpsertPod(ReadPod(p, config));
      ++existing_pods;
    }
  }
  pod = PodObject("web-7f9c6d5b8-x2k4q", false, kPodCore, kPodMemoryMiB, 1, names);
  filter_cache_body = NamesBody(pod, node_names);
  filter_blocked_body = NamesBody(
      PodObject("train-8x", false, 100 * kCardsPerNode, 20480 * kCardsPerNode, kCardsPerNode, names),
      node_names);
  filter_full_body = NodesBody(pod, node_items);

  if (Status s = api.Start(); !s.ok()) {
    setup_error = "fake API server: " + s.message();
    return;
  }
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  Result<std::unique_ptr<kube::Client>> made = kube::Client::Create(cluster);
  if (!made.ok()) {
    setup_error = "API client: " + made.message();
    return;
  }
  client = std::move(*made);
  extender = std::make_unique<Extender>(cache, client.get(), nullptr, metrics);

  Result<ExtenderArgs> args = ExtenderArgs::Parse(filter_cache_body, extender->Reader());
  if (!args.ok()) {
    setup_error = args.message();
    return;
  }
  const FilterResult filtered = extender->Filter(*args);
  std::vector<std::string> passed_names, passed_items;
  for (size_t i : filtered.passed) {
    passed_names.push_back(node_names[i]);
    passed_items.push_back(node_items[i]);
  }
  passed = filtered.passed.size();
  prioritize_cache_body = NamesBody(pod, passed_names);
  prioritize_full_body = NodesBody(pod, passed_items);

  // How many more pods of this size each node takes, by the allocator itself.
  Result<PodRequest> request = ReadPod(pod, config).request;
  if (!request.ok()) {
    setup_error = request.message();
    return;
  }
  const std::shared_ptr<const ClusterView> view = cache.Snapshot();
  std::vector<std::pair<std::string, int>> room;
  for (const NodeView* node : view->Nodes()) {
    const std::string& name = node->state.name;
    NodeState state = node->state;
    int n = 0;
    for (; n < 64; ++n) {
      Result<Assignment> a = ChooseCards(state, *request);
      if (!a.ok() || !Apply(state, *request, *a).ok()) break;
    }
    if (n) room.emplace_back(name, n);
  }
  for (int round = 0; round < 64; ++round) {
    for (const auto& [name, n] : room)
      if (n > round) bind_targets.push_back(name);
  }
}

// Untimed: lets the cache "see" the pods bound so far as allocated (what the pod watch and the device plugin
// would do), so no bind waits on the ambiguity guard, then creates the next pending pods on the API server,
// each paired with a node not used by another pod of the batch.
void Cluster::RefillBindPods() {
  for (const std::string& name : in_flight) {
    std::optional<json> stored = api.Get("pods", "default", name);
    if (!stored) continue;
    json& annotations = (*stored)["metadata"]["annotations"];
    if (annotations.contains(names.gpu_assignment))
      annotations[names.gpu_allocated] = annotations[names.gpu_assignment];
    (*stored)["status"]["phase"] = "Running";
    cache.UpsertPod(ReadPod(*stored, config));
  }
  in_flight.clear();
  pending_bodies.clear();
  next_pending = 0;
  std::set<std::string> batch_nodes;
  while (pending_bodies.size() < kBindBatch && next_target < bind_targets.size() &&
         !batch_nodes.count(bind_targets[next_target])) {
    const std::string& node = bind_targets[next_target++];
    batch_nodes.insert(node);
    const std::string name = "bind-" + std::to_string(next_bind_pod++);
    Result<json> created = api.Create("pods", PodObject(name, false, kPodCore, kPodMemoryMiB, 1, names));
    if (!created.ok()) {
      setup_error = "creating pod " + name + ": " + created.message();
      return;
    }
    pending_bodies.push_back(json{
        {"PodName", name},
        {"PodNamespace", "default"},
        {"PodUID", (*created)["metadata"]["uid"]},
        {"Node", node}}.dump());
    in_flight.push_back(name);
  }
}

Cluster& ClusterOf(int nodes) {
  static std::map<int, std::unique_ptr<Cluster>> clusters;
  std::unique_ptr<Cluster>& c = clusters[nodes];
  if (!c) c = std::make_unique<Cluster>(nodes);
  return *c;
}

void Describe(benchmark::State& state, const Cluster& c, const std::string& mode, size_t nodes_in_request,
              size_t body_bytes) {
  state.SetLabel(std::to_string(c.nodes) + " nodes x 8 cards, " + mode + ", " +
                 std::to_string(nodes_in_request) + " nodes in request, body " +
                 std::to_string(body_bytes / 1024) + " KiB");
  state.counters["nodes"] = c.nodes;
  state.counters["req_nodes"] = static_cast<double>(nodes_in_request);
  state.counters["body_KiB"] = static_cast<double>(body_bytes) / 1024;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(body_bytes));
}

// The filter handler: parse, filter, encode.
void FilterRequest(benchmark::State& state, bool full, bool blocked = false) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
  const std::string& body = blocked ? c.filter_blocked_body : full ? c.filter_full_body : c.filter_cache_body;
  size_t passed = 0;
  for (auto _ : state) {
    Result<ExtenderArgs> args = ExtenderArgs::Parse(body, c.extender->Reader());
    if (!args.ok()) return state.SkipWithError(args.message().c_str());
    const FilterResult result = c.extender->Filter(*args);
    std::string reply = EncodeFilterResult(*args, result);
    passed = result.passed.size();
    benchmark::DoNotOptimize(reply.data());
  }
  Describe(state, c,
           blocked ? "cache (NodeNames), blocked by fragmentation"
           : full  ? "full-Nodes"
                   : "cache (NodeNames)",
           static_cast<size_t>(c.nodes), body.size());
  state.counters["passed"] = static_cast<double>(passed);
}

// The prioritize handler: parse, score, encode (the request holds the nodes that passed the filter).
void PrioritizeRequest(benchmark::State& state, bool full) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
  const std::string& body = full ? c.prioritize_full_body : c.prioritize_cache_body;
  for (auto _ : state) {
    Result<ExtenderArgs> args = ExtenderArgs::Parse(body, c.extender->Reader());
    if (!args.ok()) return state.SkipWithError(args.message().c_str());
    std::string reply = EncodePrioritizeResult(c.extender->Prioritize(*args));
    benchmark::DoNotOptimize(reply.data());
  }
  Describe(state, c, full ? "full-Nodes" : "cache (NodeNames)", c.passed, body.size());
}

void BM_FilterCache(benchmark::State& state) { FilterRequest(state, false); }
void BM_FilterFullNodes(benchmark::State& state) { FilterRequest(state, true); }
// A pod no node takes though the free capacity would hold it: the filter also diagnoses it and plans its
// defragmentation for /metrics (Extender::Filter, Metrics::NoteFilter), the worst case of a failing filter.
void BM_FilterCacheBlocked(benchmark::State& state) { FilterRequest(state, false, true); }
void BM_PrioritizeCache(benchmark::State& state) { PrioritizeRequest(state, false); }
void BM_PrioritizeFullNodes(benchmark::State& state) { PrioritizeRequest(state, true); }

// The cluster's free core per GPU model, summed from the cache's view each time the extender publishes its
// workload model (every 16 new pods).
void BM_ClusterFree(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  const std::shared_ptr<const ClusterView> view = c.cache.Snapshot();
  for (auto _ : state) benchmark::DoNotOptimize(view->Free());
  state.counters["nodes"] = static_cast<double>(c.nodes);
}

// ExtenderArgs::Parse alone on the full-Nodes filter body (copy into a padded buffer, on-demand walk, each
// node's metadata.name).
void BM_ExtenderArgsParseFullNodes(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Result<ExtenderArgs> args = ExtenderArgs::Parse(c.filter_full_body, c.extender->Reader());
    if (!args.ok()) return state.SkipWithError(args.message().c_str());
    benchmark::DoNotOptimize(args->node_names.data());
  }
  Describe(state, c, "full-Nodes, ExtenderArgs::Parse only", static_cast<size_t>(c.nodes),
           c.filter_full_body.size());
}

// Floor: simdjson on demand over the same body, walking every top-level field and counting Nodes.items
// (the body is already padded; ExtenderArgs::Parse also copies it).
void BM_SimdjsonOnDemandFullNodes(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  const simdjson::padded_string body(c.filter_full_body);
  simdjson::ondemand::parser parser;
  size_t items = 0;
  for (auto _ : state) {
    items = 0;
    simdjson::ondemand::document doc = parser.iterate(body);
    for (auto field : doc.get_object()) {
      if (std::string_view(field.unescaped_key()) != "Nodes") continue;
      for (auto list_field : field.value().get_object()) {
        if (std::string_view(list_field.unescaped_key()) != "items") continue;
        for (auto item : list_field.value().get_array()) {
          (void)item;
          ++items;
        }
      }
    }
    benchmark::DoNotOptimize(items);
  }
  if (items != static_cast<size_t>(c.nodes)) return state.SkipWithError("simdjson counted the wrong items");
  Describe(state, c, "full-Nodes, simdjson on demand: count items", items, c.filter_full_body.size());
}

// Floor: simdjson's DOM (the whole tape) over the same body.
void BM_SimdjsonDomFullNodes(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  const simdjson::padded_string body(c.filter_full_body);
  simdjson::dom::parser parser;
  size_t items = 0;
  for (auto _ : state) {
    simdjson::dom::element doc = parser.parse(body);
    items = simdjson::dom::array(doc["Nodes"]["items"]).size();
    benchmark::DoNotOptimize(items);
  }
  if (items != static_cast<size_t>(c.nodes)) return state.SkipWithError("simdjson counted the wrong items");
  Describe(state, c, "full-Nodes, simdjson DOM", items, c.filter_full_body.size());
}

// A DOM-building parser for comparison: nlohmann::json::parse of the same body.
void BM_NlohmannDomFullNodes(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  size_t items = 0;
  for (auto _ : state) {
    const json doc = json::parse(c.filter_full_body);
    items = doc["Nodes"]["items"].size();
    benchmark::DoNotOptimize(items);
  }
  if (items != static_cast<size_t>(c.nodes)) return state.SkipWithError("nlohmann counted the wrong items");
  Describe(state, c, "full-Nodes, nlohmann DOM", items, c.filter_full_body.size());
}

// The bind handler against the fake API server on loopback: BindArgs::Parse + Extender::Bind (GET pod,
// choose + reserve in the cache, PATCH gpu-assignment, POST Binding, POST Event) + encode. Real time; the
// CPU column is this thread's (client and extender side; the fake API server runs on its own threads).
void BM_BindOverFakeApiServer(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
  int64_t binds = 0;
  for (auto _ : state) {
    if (c.next_pending == c.pending_bodies.size()) {
      state.PauseTiming();
      c.RefillBindPods();
      state.ResumeTiming();
      if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
      if (c.pending_bodies.empty()) return state.SkipWithError("no node has room for another pod");
    }
    Result<BindArgs> args = BindArgs::Parse(c.pending_bodies[c.next_pending++]);
    if (!args.ok()) return state.SkipWithError(args.message().c_str());
    const std::string error = c.extender->Bind(*args);
    std::string reply = EncodeError(error);
    benchmark::DoNotOptimize(reply.data());
    if (!error.empty()) return state.SkipWithError(error.c_str());
    ++binds;
  }
  state.SetLabel(std::to_string(c.nodes) +
                 " nodes x 8 cards, bind over the fake API server on loopback (GET+PATCH+Binding+Event)");
  state.counters["nodes"] = c.nodes;
  state.counters["binds"] = static_cast<double>(binds);
}

// Bind's in-process part only: choose cards + record them as assumed (Reserve), then roll back (Unreserve)
// so the cluster stays the same; no API calls.
void BM_BindReserveInProcess(benchmark::State& state) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
  Result<PodRequest> request = ReadPod(c.pod, c.config).request;
  if (!request.ok()) return state.SkipWithError(request.message().c_str());
  WorkloadModel model;
  model.Observe(*request);
  const std::string key = request->Key();
  const std::string uid = "uid-reserve";
  const size_t targets = std::min(c.passed, c.bind_targets.size());
  if (targets == 0) return state.SkipWithError("no node has room for the pod");
  size_t target = 0;
  for (auto _ : state) {
    const std::string& node = c.bind_targets[target++ % targets];
    Result<Assignment> a = c.cache.Reserve(node, *request, uid, UnixNowNs(), &model,
                                           std::chrono::steady_clock::now() + std::chrono::seconds(3));
    if (!a.ok()) return state.SkipWithError(a.message().c_str());
    c.cache.Unreserve(key, uid);
  }
  state.SetLabel(std::to_string(c.nodes) + " nodes x 8 cards, Reserve + Unreserve (no API calls)");
  state.counters["nodes"] = c.nodes;
}

// A load generator against the real HTTP server on loopback (cpp-httplib client, one keep-alive connection
// per benchmark thread): request latency p50/p99 and throughput (items_per_second, real time) per verb and
// payload mode. RSS is the whole process: the extender, the synthetic cluster's fake API server and the
// request bodies.
void HttpVerb(benchmark::State& state, const char* path, bool prioritize, bool full) {
  Cluster& c = ClusterOf(static_cast<int>(state.range(0)));
  const int port = c.HttpPort();
  if (!c.setup_error.empty()) return state.SkipWithError(c.setup_error.c_str());
  const std::string& body = prioritize ? (full ? c.prioritize_full_body : c.prioritize_cache_body)
                                       : (full ? c.filter_full_body : c.filter_cache_body);
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);  // as kube-scheduler's Go client
  client.set_read_timeout(60);
  std::vector<double> micros;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    httplib::Result res = client.Post(path, body, "application/json");
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (!res || res->status != 200) return state.SkipWithError("the extender did not answer 200");
    benchmark::DoNotOptimize(res->body.data());
  }
  std::sort(micros.begin(), micros.end());
  const auto at = [&](double q) {
    return micros.empty() ? 0 : micros[static_cast<size_t>(q * (micros.size() - 1))];
  };
  state.SetItemsProcessed(state.iterations());
  state.counters["p50_us"] = benchmark::Counter(at(0.5), benchmark::Counter::kAvgThreads);
  state.counters["p99_us"] = benchmark::Counter(at(0.99), benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) state.counters["rss_MiB"] = ResidentMiB();
  state.SetLabel(std::to_string(c.nodes) + " nodes x 8 cards, HTTP " + path + ", " +
                 (full ? "full-Nodes" : "cache (NodeNames)") + ", body " +
                 std::to_string(body.size() / 1024) + " KiB");
}

void BM_HttpFilterCache(benchmark::State& state) { HttpVerb(state, "/filter", false, false); }
void BM_HttpPrioritizeCache(benchmark::State& state) { HttpVerb(state, "/prioritize", true, false); }
void BM_HttpFilterFullNodes(benchmark::State& state) { HttpVerb(state, "/filter", false, true); }
void BM_HttpPrioritizeFullNodes(benchmark::State& state) { HttpVerb(state, "/prioritize", true, true); }

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("nodes")->Arg(1000)->Arg(5000)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_FilterCache)->Apply(Sizes);
BENCHMARK(BM_FilterCacheBlocked)->Apply(Sizes);
BENCHMARK(BM_PrioritizeCache)->Apply(Sizes);
BENCHMARK(BM_FilterFullNodes)->Apply(Sizes);
BENCHMARK(BM_PrioritizeFullNodes)->Apply(Sizes);
BENCHMARK(BM_ClusterFree)->Apply(Sizes);
BENCHMARK(BM_ExtenderArgsParseFullNodes)->Apply(Sizes);
BENCHMARK(BM_SimdjsonOnDemandFullNodes)->Apply(Sizes);
BENCHMARK(BM_SimdjsonDomFullNodes)->Apply(Sizes);
BENCHMARK(BM_NlohmannDomFullNodes)->Apply(Sizes);
BENCHMARK(BM_BindReserveInProcess)->Apply(Sizes);
BENCHMARK(BM_BindOverFakeApiServer)->Apply(Sizes)->UseRealTime();
BENCHMARK(BM_HttpFilterCache)->Apply(Sizes)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(BM_HttpPrioritizeCache)->Apply(Sizes)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(BM_HttpFilterFullNodes)->Apply(Sizes)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(BM_HttpPrioritizeFullNodes)->Apply(Sizes)->UseRealTime()->Threads(1)->Threads(2);

}  // namespace
}  // namespace mgpu::extender

// Bind logs one info line per pod; at warn the output stays the benchmark table.
int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
