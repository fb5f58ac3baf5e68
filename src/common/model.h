// The shared vocabulary: cards, a node's inventory and per-card usage, what a pod asks for, and an assignment
// of cards to a pod's containers. Plain structs; the rules that act on them live in request.h and
// allocator.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mgpu {

enum class ComputePolicy { kFixedShare, kGuaranteedBurstShare, kNativeBurstShare };
enum class Qos { kOnline, kOffline };
// How cards are chosen inside a node.
enum class CardPolicy { kBinpack, kSpread, kFragmentation };
// How nodes are scored.
enum class NodePolicy { kBinpack, kSpread, kFragmentation };
enum class IsolationBackend { kNone, kHamiCore, kMps, kMgpu };

std::string_view Name(ComputePolicy policy);
std::string_view Name(Qos qos);
std::string_view Name(CardPolicy policy);
std::string_view Name(NodePolicy policy);
std::string_view Name(IsolationBackend backend);
std::optional<ComputePolicy> ParseComputePolicy(std::string_view text);
std::optional<CardPolicy> ParseCardPolicy(std::string_view text);
std::optional<NodePolicy> ParseNodePolicy(std::string_view text);
std::optional<IsolationBackend> ParseIsolationBackend(std::string_view text);

// One physical GPU card.
struct Card {
  int index = 0;
  std::string uuid;
  std::string model;
  int64_t memory_mib = 0;
  bool healthy = true;

  bool operator==(const Card&) const = default;
};

// What a node's device plugin publishes in the D/gpu-inventory annotation.
struct NodeInventory {
  std::vector<Card> cards;
  int64_t memory_unit_mib = 1;
  IsolationBackend isolation = IsolationBackend::kNone;
  std::string version;
  int64_t heartbeat = 0;  // unix seconds of the last publication
  // The plugin is stopping (it said so on SIGTERM, before it stops serving the kubelet): its cards take no
  // new pods until a plugin publishes again. Encoded only when true.
  bool stopping = false;

  bool operator==(const NodeInventory&) const = default;
};

// What is allocated on one card, summed over the containers holding a piece of it.
struct CardUsage {
  int core = 0;            // online mgpu-core percent
  int reclaimed_core = 0;  // offline reclaimed-mgpu-core percent
  int64_t memory_mib = 0;
  int holders = 0;             // container pieces on the card
  int offline_holders = 0;     // of which offline
  int multi_card_holders = 0;  // of which belong to containers spread over several cards
  int exclusive_holders = 0;   // of which take the whole card (dedicated_cores)
  ComputePolicy policy = ComputePolicy::kFixedShare;  // meaningful only while holders > 0

  bool operator==(const CardUsage&) const = default;
};

// A card as the allocator sees it: the card, how much memory may be handed out, and what is taken.
struct CardState {
  Card card;
  int64_t capacity_mib = 0;  // (memory - reserved) rounded down to the memory unit
  CardUsage usage;

  int FreeCore() const { return 100 - usage.core; }
  int FreeReclaimedCore() const { return 100 - usage.reclaimed_core; }
  int64_t FreeMemoryMiB() const { return capacity_mib - usage.memory_mib; }
};

// `text` as a Kubernetes label value: characters other than letters, digits, '-', '_' and '.' become '-',
// at most 63 characters, beginning and ending with a letter or digit ("NVIDIA A10" -> "NVIDIA-A10").
std::string LabelValue(std::string_view text);

struct NodeState {
  std::string name;
  std::vector<CardState> cards;
  std::string product;          // its D/gpu.product label: LabelValue of the lowest-index card's model
  int64_t cpu_free_milli = -1;  // the node's unrequested CPU where the caller tracks it; negative: unknown
  int64_t host_memory_free_mib = -1;  // the same for memory

  const CardState* FindCard(std::string_view uuid) const;
  CardState* FindCard(std::string_view uuid);
};

// One container's ask, already validated against the rules of DESIGN §3. Totals over all its cards.
struct ContainerRequest {
  std::string name;
  bool init = false;
  int core = 0;            // online mgpu-core, total
  int reclaimed_core = 0;  // offline reclaimed-mgpu-core, total
  int64_t memory_mib = 0;  // total, already multiplied by the memory unit
  int card_count = 1;      // distinct cards, each taking an equal share

  int CorePerCard() const { return core / card_count; }
  int ReclaimedCorePerCard() const { return reclaimed_core / card_count; }
  int64_t MemoryPerCardMiB() const { return memory_mib / card_count; }
  bool operator==(const ContainerRequest&) const = default;
};

// A pod's ask: only containers asking for some mgpu resource are listed.
// "namespace/name": the one key of a pod on every side (a pod without a namespace is in "default").
std::string PodKey(std::string_view ns, std::string_view name);

struct PodRequest {
  std::string namespace_name;
  std::string name;
  std::string uid;
  Qos qos = Qos::kOnline;
  bool dedicated = false;  // dedicated_cores: online, whole cards, nobody else on them
  ComputePolicy compute_policy = ComputePolicy::kFixedShare;
  CardPolicy card_policy = CardPolicy::kBinpack;
  NodePolicy node_policy = NodePolicy::kBinpack;
  int64_t cpu_milli = 0;  // the pod's CPU request (kube-scheduler's effective request), for fragmentation
  int64_t host_memory_mib = 0;          // the pod's memory request, for fragmentation
  std::vector<std::string> gpu_models;  // D/gpu.product values its node selection allows; empty: any
  std::vector<ContainerRequest> containers;

  bool AsksForGpu() const { return !containers.empty(); }
  std::string Key() const { return PodKey(namespace_name, name); }
};

// One container's piece of one card.
struct CardShare {
  std::string uuid;
  int core = 0;
  int reclaimed_core = 0;
  int64_t memory_mib = 0;

  bool operator==(const CardShare&) const = default;
};

// Cards' worth of one slice, for billing (DESIGN §7, the seeds' formula): max(core / 100, memory / the card's
// memory), the larger of the online and the reclaimed core counting. `card_memory_mib` is the whole card's.
double GpuShare(const CardShare& slice, int64_t card_memory_mib);

struct ContainerAssignment {
  std::string container;
  std::vector<CardShare> cards;

  bool operator==(const ContainerAssignment&) const = default;
};

// Cards given to each GPU container of a pod: the D/gpu-assignment (scheduler's choice) and D/gpu-allocated
// (what the kubelet really handed out) annotations both carry one.
struct Assignment {
  std::vector<ContainerAssignment> containers;

  const ContainerAssignment* Find(std::string_view container) const;
  bool operator==(const Assignment&) const = default;
};

}  // namespace mgpu
