// The DRA mode's shared vocabulary and decisions (docs/dra.md), used by the node daemon (src/dra), the
// webhook (src/extender) and the replay (bench/): the devices a card is published as, their names and
// capacities, the DeviceClasses, what a pod's GPU container asks for as a claim, the rules a claim's request
// must keep, and what an allocation result means for the guard. Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"
#include "common/request.h"
#include "common/result.h"

namespace mgpu::dra {

// Capacity names of a card's devices (under the driver's domain, as every unqualified name of a slice is).
inline constexpr std::string_view kCores = "cores";
inline constexpr std::string_view kReclaimedCores = "reclaimedCores";
inline constexpr std::string_view kMemory = "memory";
// The counter every device of a card consumes one of, from the card's counter set of one: while any device of
// the card is allocated, the scheduler allocates none of the others.
inline constexpr std::string_view kSharingCounter = "sharing";

// The six devices one card is published as, in slice order (docs/dra.md §2).
enum class Variant { kFixed, kGuaranteed, kNative, kFixedOnline, kGuaranteedOnline, kWhole };
inline constexpr Variant kVariants[] = {Variant::kFixed,       Variant::kGuaranteed,       Variant::kNative,
                                        Variant::kFixedOnline, Variant::kGuaranteedOnline, Variant::kWhole};

std::string_view Name(Variant variant);  // "fixed", "guaranteed-online", "whole", ...
std::optional<Variant> ParseVariant(std::string_view name);
// What config dra.cards accepts, for its error: "any, fixed, guaranteed, ...".
std::string CardsValues();
// The devices each card of the node is published as (config dra.cards, docs/dra.md §2): the six variants
// sharing the card's counter ("any"), or the one variant of the node pool, with no counter.
std::vector<Variant> PublishedVariants(const Config& config);
bool SharedCounters(const Config& config);  // "any": the variants of a card consume its counter
// Whether a claim of the whole class may take the device: the non-shareable whole card, and with one variant
// per card its shareable device too (a claim that names no memory consumes all of it, so it is alone there).
bool WholeCardDevice(Variant variant, const Config& config);
// The compute policy of a shareable variant; nullopt for the whole card.
std::optional<ComputePolicy> PolicyOf(Variant variant);
bool Shareable(Variant variant);      // allowMultipleAllocations
bool OfflineShares(Variant variant);  // has reclaimedCores: offline shares may land there

// "gpu-<index>-<variant>", and back (nullopt for any other name).
std::string DeviceName(int card_index, Variant variant);
struct DeviceRef {
  int card_index = 0;
  Variant variant = Variant::kFixed;
  bool operator==(const DeviceRef&) const = default;
};
std::optional<DeviceRef> ParseDeviceName(std::string_view name);
// "gpu-<index>": the card's counter set.
std::string CounterSetName(int card_index);

// A memory amount as the API server writes a Quantity back (the largest binary suffix that divides it:
// "24Gi", "81559Mi"), so that objects read back compare equal to those sent.
std::string MemoryQuantity(int64_t mib);

// The driver's name: the resource domain. DeviceClass names: `<driver>` (the shipped default policy,
// fixed-share), "<policy>.<driver>", "whole.<driver>" (also the extended resource "<driver>/gpu").
std::string DriverName(const Config& config);
std::string ClassName(ComputePolicy policy, const Config& config);
std::string WholeClassName(const Config& config);
std::string WholeCardResource(const Config& config);  // "<driver>/gpu"
// The policy a class of the driver stands for (the default class: fixed-share); nullopt for the whole class
// and for classes that are not the driver's.
std::optional<ComputePolicy> ClassPolicy(std::string_view class_name, const Config& config);
bool IsDriverClass(std::string_view class_name, const Config& config);

// What one GPU container of a pod asks for as a ResourceClaimSpec (docs/dra.md §3): one request "gpu", class
// by the pod's compute policy (dedicated_cores: whole cards), count = card count, per-card capacities; N > 1
// with the selector of devices without offline shares and distinct cards.
nlohmann::json ClaimSpecFor(const PodRequest& pod, const ContainerRequest& container, const Config& config);
// A name for a ResourceClaimTemplate holding ClaimSpecFor: the same for every container of the same shape
// (policy, QoS, amounts, card count), a DNS label.
std::string TemplateNameFor(const PodRequest& pod, const ContainerRequest& container, const Config& config);

// Checks a ResourceClaimSpec (spec of a ResourceClaim, spec.spec of a template) that uses the driver's
// classes against the rules of docs/dra.md §4: one request of the driver's classes, with `exactly`; a shared
// class: exactly one of cores / reclaimedCores at least minCorePercent per card (at most 100), memory asked,
// count 1..128, offline only with count 1 and not native, N > 1 with the selector and the distinct-card
// constraint. Claims of other drivers' classes pass. The error names `what` (e.g. "ResourceClaim default/x")
// and the rule.
Status CheckClaimSpec(const nlohmann::json& spec, const Config& config, std::string_view what);

// What one allocation result consumed (MiB for memory), as the allocator wrote it.
struct Consumed {
  int64_t cores = 0;
  int64_t reclaimed_cores = 0;
  int64_t memory_mib = 0;
  bool operator==(const Consumed&) const = default;
};
// Reads a result's consumedCapacity (absent: all zero, as for a non-shareable device); a value that is not a
// whole quantity is an error naming it.
Result<Consumed> ReadConsumed(const nlohmann::json& result);

// One allocation result of the driver as the guard will enforce it.
struct AllocatedDevice {
  DeviceRef device;
  Consumed consumed;
  int64_t capacity_mib = 0;  // the card's memory capacity (what the slice published)
};

// The claim's share of its cards: the environment of DESIGN §6 follows from it.
struct ClaimShare {
  Qos qos = Qos::kOnline;
  ComputePolicy policy = ComputePolicy::kFixedShare;
  int core_per_card = 0;            // online
  int reclaimed_core_per_card = 0;  // offline
  int64_t memory_per_card_mib = 0;
  bool whole = false;  // a whole card or a share holding the card's whole memory and no core
  bool operator==(const ClaimShare&) const = default;
};
// The share of a claim's results of the driver (one request, its N cards), or one sentence naming `claim` and
// the broken rule of docs/dra.md §4.
Result<ClaimShare> ShareOf(const std::vector<AllocatedDevice>& devices, const Config& config,
                           std::string_view claim);

// An allocated ResourceClaim holding devices of the driver, as the extender's informer and the node daemon's
// prepare read it.
struct ClaimFacts {
  struct Named {  // how a result of the driver names its device
    std::string request;
    std::string device;    // "gpu-0-fixed"
    std::string share_id;  // empty for a device that is not shared
  };
  std::string key;  // "<namespace>/<name>"
  std::string uid;
  std::string resource_version;
  std::string node;                      // the pool its results name: one node's
  std::vector<AllocatedDevice> devices;  // capacity_mib unknown here (0): the node's cards say it
  std::vector<Named> names;              // beside devices
};
// nullopt when the claim is not allocated or holds no device of the driver; an error names the claim and
// what could not be read (a device that is not one of the driver's names, a consumedCapacity that is no
// whole quantity, results in two pools).
Result<std::optional<ClaimFacts>> ReadClaim(const nlohmann::json& claim, const Config& config);

// The extender's side (docs/dra.md §7): it scores DRA pods' nodes with mgpu's policy, counting what the
// driver's allocated claims hold on each node's cards.

// What an allocated claim holds on its node's cards, as the allocator counts a pod's cards (Apply): a pod
// request of one container "gpu" (the claim's share: ShareOf) and its cards by uuid. An error names the
// claim and the card the node does not have, or the rule its results break.
struct HeldShare {
  PodRequest request;
  Assignment assignment;
};
Result<HeldShare> HeldOn(const ClaimFacts& claim, const NodeState& node, const Config& config);

// The webhook writes a DRA pod's mgpu limits, as it removes them, into D/dra-limits (container name ->
// resource -> quantity; mgpu-memory in memoryUnitMiB devices, as a stored pod counts it, request.h) and
// gives each rewritten container one D/dra-gpu, so that kube-scheduler calls the
// extender for the pod (docs/dra.md §7). DraLimitsOf is that annotation's value for `pod`'s GPU containers.
nlohmann::json DraLimitsOf(const nlohmann::json& pod, const PodRequest& request, const Config& config);
// The pod as it was written, for ParsePodRequest: the limits of D/dra-limits put back and D/dra-gpu taken
// out. nullopt when the pod has no D/dra-limits annotation; an error when it is not what DraLimitsOf writes.
Result<std::optional<nlohmann::json>> WithDraLimits(const nlohmann::json& pod, const Config& config);

// A pod no /mutate rewrote whose containers hold claims of the driver's classes (written by hand, through a
// ResourceClaimTemplate or a ResourceClaim) or ask whole cards through <driver>/gpu (the claim
// kube-scheduler makes itself, of the whole class), in
// mgpu's own terms, so that the extender scores its nodes as it does /mutate's pods (docs/dra.md §7):
// D/dra-limits's value (container -> the mgpu limits its claim stands for: cores or reclaimedCores times its
// cards, memory in memoryUnitMiB, rounded up, times its cards; a whole card 100 cores and one unit) and the
// pod annotations ParsePodRequest reads them with (qos_level, the compute policy, gpu-count), which replace
// the pod's own.
struct ClaimsAsLimits {
  std::map<std::string, std::map<std::string, std::string>> limits;  // D/dra-limits's value, as JSON
  Annotations annotations;
  // A container asks <driver>/gpu: kube-scheduler calls the extender for the pod (managedResources) and must
  // see no D/dra-gpu beside it (v1.36.2's DynamicResources filter fails a pod asking an extended resource that
  // is neither a node's nor a DeviceClass's: "cannot fit resource").
  bool extended_resource = false;
};
// `specs`: the ResourceClaimSpec behind each of the pod's spec.resourceClaims entries that could be read, by
// entry name (a claim two containers hold counts in the first). nullopt when no container holds a claim of
// the driver's classes; an error, one sentence naming the pod, when a claim breaks a
// rule (CheckClaimSpec), a container holds two of them, or they differ in kind (online, offline, whole card),
// compute policy or card count: one mgpu pod is one kind of share on one number of cards.
Result<std::optional<ClaimsAsLimits>> LimitsOfClaims(const nlohmann::json& pod,
                                                     const std::map<std::string, nlohmann::json>& specs,
                                                     const Config& config);

}  // namespace mgpu::dra
