#include "common/dra.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_path.h"
#include "common/quantity.h"
#include "common/request.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

constexpr int64_t kMaxCount = 128;  // a claim's results are at most 128 devices (AllocationResultsMaxSize)
constexpr std::string_view kRequestName = "gpu";

std::string MultiCardSelector(const Config& config) {
  return "device.attributes[\"" + DriverName(config) + "\"].offlineShares == false";
}

std::string UuidAttribute(const Config& config) { return DriverName(config) + "/uuid"; }

// The quantity at capacity.requests[name] of a request, or nullopt when not asked.
Result<std::optional<int64_t>> Asked(const json& requests, std::string_view name, bool memory) {
  const json* v = requests.is_object() && requests.contains(name) ? &requests[std::string(name)] : nullptr;
  if (v == nullptr || v->is_null()) return std::optional<int64_t>();
  auto n = ParseQuantityJson(*v, memory ? QuantityUnit::kMebi : QuantityUnit::kWhole);
  if (!n.ok()) return n.error();
  return std::optional<int64_t>(*n);
}

// The whole cards a container asks through <driver>/gpu (KEP-5004: kube-scheduler makes its claim), its
// limits else its requests; nullopt when it asks none (the API server keeps extended resources integers).
std::optional<int64_t> WholeCardsAsked(const json& container, const Config& config) {
  for (const char* kind : {"limits", "requests"}) {
    const json* v = FindPath(container, {"resources", kind, WholeCardResource(config).c_str()});
    if (v == nullptr) continue;
    Result<int64_t> n = ParseQuantityJson(*v);
    return n.ok() && *n > 0 ? std::optional<int64_t>(*n) : std::nullopt;
  }
  return std::nullopt;
}

// The share one claim asks of the driver (LimitsOfClaims), as mgpu's pod annotations and limits say it.
struct AskedShare {
  std::string qos;  // kQosLevelAnnotation's value: shared_cores, reclaimed_cores, dedicated_cores
  std::optional<ComputePolicy> policy;  // nullopt: a whole card
  int64_t count = 1;
  int64_t core_per_card = 100;  // cores or reclaimedCores
  int64_t memory_mib = 0;       // per card; 0: a whole card
  bool operator==(const AskedShare&) const = default;
  std::string Text() const {
    return qos + (policy ? " " + std::string(Name(*policy)) : "") + " on " + std::to_string(count) + " card" +
           (count > 1 ? "s" : "");
  }
};

}  // namespace

std::string_view Name(Variant variant) {
  switch (variant) {
    case Variant::kFixed:
      return "fixed";
    case Variant::kGuaranteed:
      return "guaranteed";
    case Variant::kNative:
      return "native";
    case Variant::kFixedOnline:
      return "fixed-online";
    case Variant::kGuaranteedOnline:
      return "guaranteed-online";
    case Variant::kWhole:
      return "whole";
  }
  return "unknown";
}

std::optional<Variant> ParseVariant(std::string_view name) {
  for (Variant v : kVariants) {
    if (name == Name(v)) return v;
  }
  return std::nullopt;
}

std::string CardsValues() {
  std::string out = "any";
  for (Variant v : kVariants) out += ", " + std::string(Name(v));
  return out;
}

bool SharedCounters(const Config& config) { return !ParseVariant(config.dra.cards).has_value(); }

std::vector<Variant> PublishedVariants(const Config& config) {
  if (auto one = ParseVariant(config.dra.cards)) return {*one};
  return {std::begin(kVariants), std::end(kVariants)};
}

bool WholeCardDevice(Variant variant, const Config& config) {
  return variant == Variant::kWhole || !SharedCounters(config);
}

std::optional<ComputePolicy> PolicyOf(Variant variant) {
  switch (variant) {
    case Variant::kFixed:
    case Variant::kFixedOnline:
      return ComputePolicy::kFixedShare;
    case Variant::kGuaranteed:
    case Variant::kGuaranteedOnline:
      return ComputePolicy::kGuaranteedBurstShare;
    case Variant::kNative:
      return ComputePolicy::kNativeBurstShare;
    case Variant::kWhole:
      return std::nullopt;
  }
  return std::nullopt;
}

bool Shareable(Variant variant) { return variant != Variant::kWhole; }

bool OfflineShares(Variant variant) { return variant == Variant::kFixed || variant == Variant::kGuaranteed; }

std::string DeviceName(int card_index, Variant variant) {
  return "gpu-" + std::to_string(card_index) + "-" + std::string(Name(variant));
}

std::optional<DeviceRef> ParseDeviceName(std::string_view name) {
  if (!name.starts_with("gpu-")) return std::nullopt;
  name.remove_prefix(4);
  const size_t dash = name.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  int index = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dash, index);
  if (ec != std::errc() || end != name.data() + dash || index < 0) return std::nullopt;
  if (dash > 1 && name[0] == '0') return std::nullopt;  // one spelling per index
  if (auto v = ParseVariant(name.substr(dash + 1))) return DeviceRef{index, *v};
  return std::nullopt;
}

std::string CounterSetName(int card_index) { return "gpu-" + std::to_string(card_index); }

std::string MemoryQuantity(int64_t mib) {
  if (mib == 0) return "0";
  static constexpr const char* kSuffixes[] = {"Mi", "Gi", "Ti", "Pi", "Ei"};
  size_t s = 0;
  while (s + 1 < std::size(kSuffixes) && mib % 1024 == 0) {
    mib /= 1024;
    ++s;
  }
  return std::to_string(mib) + kSuffixes[s];
}

std::string DriverName(const Config& config) { return config.resource_domain; }

std::string ClassName(ComputePolicy policy, const Config& config) {
  return std::string(Name(policy)) + "." + DriverName(config);
}

std::string WholeClassName(const Config& config) { return "whole." + DriverName(config); }

std::string WholeCardResource(const Config& config) { return DriverName(config) + "/gpu"; }

std::optional<ComputePolicy> ClassPolicy(std::string_view class_name, const Config& config) {
  if (class_name == DriverName(config)) return ComputePolicy::kFixedShare;
  for (ComputePolicy p :
       {ComputePolicy::kFixedShare, ComputePolicy::kGuaranteedBurstShare, ComputePolicy::kNativeBurstShare}) {
    if (class_name == ClassName(p, config)) return p;
  }
  return std::nullopt;
}

bool IsDriverClass(std::string_view class_name, const Config& config) {
  return ClassPolicy(class_name, config).has_value() || class_name == WholeClassName(config);
}

json ClaimSpecFor(const PodRequest& pod, const ContainerRequest& c, const Config& config) {
  json exactly = {{"allocationMode", "ExactCount"}, {"count", c.card_count}};
  json spec = json::object();
  if (pod.dedicated) {
    exactly["deviceClassName"] = WholeClassName(config);
  } else {
    exactly["deviceClassName"] = ClassName(pod.compute_policy, config);
    json requests = json::object();
    if (pod.qos == Qos::kOffline) {
      requests[std::string(kReclaimedCores)] = std::to_string(c.ReclaimedCorePerCard());
    } else {
      requests[std::string(kCores)] = std::to_string(c.CorePerCard());
    }
    requests[std::string(kMemory)] = MemoryQuantity(c.MemoryPerCardMiB());
    exactly["capacity"] = {{"requests", std::move(requests)}};
    if (c.card_count > 1)
      exactly["selectors"] = json::array({{{"cel", {{"expression", MultiCardSelector(config)}}}}});
  }
  json devices = {{"requests", json::array({{{"name", kRequestName}, {"exactly", std::move(exactly)}}})}};
  if (c.card_count > 1) {
    devices["constraints"] = json::array(
        {{{"requests", json::array({kRequestName})}, {"distinctAttribute", UuidAttribute(config)}}});
  }
  spec["devices"] = std::move(devices);
  return spec;
}

std::string TemplateNameFor(const PodRequest& pod, const ContainerRequest& c, const Config& config) {
  std::string name = DriverName(config) + ".";
  if (pod.dedicated) {
    name += "whole-m" + std::to_string(c.MemoryPerCardMiB());
  } else {
    name += std::string(Name(pod.compute_policy)) + "-";
    name += pod.qos == Qos::kOffline ? "offline-r" + std::to_string(c.ReclaimedCorePerCard())
                                     : "online-c" + std::to_string(c.CorePerCard());
    name += "-m" + std::to_string(c.MemoryPerCardMiB());
  }
  name += "-x" + std::to_string(c.card_count);
  return name;
}

Status CheckClaimSpec(const json& spec, const Config& config, std::string_view what) {
  const std::string who(what);
  const json* requests = FindPath(spec, {"devices", "requests"});
  if (requests == nullptr || !requests->is_array()) return Status::Ok();
  const json* ours = nullptr;
  for (const json& r : *requests) {
    if (const json* sub = FindPath(r, {"firstAvailable"}); sub && sub->is_array()) {
      for (const json& s : *sub) {
        if (IsDriverClass(StringAt(s, {"deviceClassName"}), config))
          return Error{who + " asks " + DriverName(config) +
                       " devices in firstAvailable; ask them with exactly"};
      }
    }
    if (!IsDriverClass(StringAt(r, {"exactly", "deviceClassName"}), config)) continue;
    if (ours != nullptr)
      return Error{who + " has more than one request of " + DriverName(config) +
                   " classes; one claim is one share (one request, count = its cards)"};
    ours = &r;
  }
  if (ours == nullptr) return Status::Ok();

  const std::string request = StringAt(*ours, {"name"});
  const json& exactly = (*ours)["exactly"];
  const std::string where = who + " request " + request;
  const std::string mode = StringAt(exactly, {"allocationMode"});
  if (!mode.empty() && mode != "ExactCount")
    return Error{where + " has allocationMode " + mode + "; " + DriverName(config) +
                 " devices need ExactCount"};
  int64_t count = 1;
  if (const json* n = FindPath(exactly, {"count"}); n && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > kMaxCount)
      return Error{where + " count must be a whole number from 1 to " + std::to_string(kMaxCount)};
    count = n->get<int64_t>();
  }
  const std::string class_name = StringAt(exactly, {"deviceClassName"});
  const std::optional<ComputePolicy> policy = ClassPolicy(class_name, config);
  if (!policy) return Status::Ok();  // whole cards: nothing to share

  const json* asked = FindPath(exactly, {"capacity", "requests"});
  const json empty = json::object();
  const json& capacities = asked ? *asked : empty;
  auto cores = Asked(capacities, kCores, false);
  auto reclaimed = Asked(capacities, kReclaimedCores, false);
  auto memory = Asked(capacities, kMemory, true);
  for (auto* r : {&cores, &reclaimed, &memory}) {
    if (!r->ok()) return Error{where + " capacity: " + r->message()};
  }
  const int64_t core = cores->value_or(0), reclaimed_core = reclaimed->value_or(0);
  if (core > 0 && reclaimed_core > 0)
    return Error{where +
                 " asks both cores and reclaimedCores; a share is online (cores) or offline "
                 "(reclaimedCores), not both"};
  if (core == 0 && reclaimed_core == 0)
    return Error{where +
                 " asks neither cores (online) nor reclaimedCores (offline); whole cards come from class " +
                 WholeClassName(config)};
  const int64_t per_card = core > 0 ? core : reclaimed_core;
  const std::string_view core_name = core > 0 ? kCores : kReclaimedCores;
  if (per_card < config.min_core_percent || per_card > 100)
    return Error{where + " asks " + std::string(core_name) + " " + std::to_string(per_card) +
                 " per card; it must lie between " + std::to_string(config.min_core_percent) + " and 100"};
  if (!memory->has_value() || **memory <= 0)
    return Error{where + " asks no memory; a share names its memory per card (e.g. memory: 4Gi)"};
  if (reclaimed_core > 0 && count > 1)
    return Error{where + " is offline (reclaimedCores) on " + std::to_string(count) +
                 " cards; offline shares take one card"};
  if (reclaimed_core > 0 && *policy == ComputePolicy::kNativeBurstShare)
    return Error{where + " is offline (reclaimedCores) in class " + class_name +
                 "; offline shares only go to fixed-share and guaranteed-burst-share cards"};
  if (count > 1) {
    const std::string selector = MultiCardSelector(config);
    bool has_selector = false;
    if (const json* s = FindPath(exactly, {"selectors"}); s && s->is_array()) {
      for (const json& sel : *s) has_selector |= StringAt(sel, {"cel", "expression"}) == selector;
    }
    bool has_distinct = false;
    if (const json* cs = FindPath(spec, {"devices", "constraints"}); cs && cs->is_array()) {
      for (const json& c : *cs) {
        if (StringAt(c, {"distinctAttribute"}) != UuidAttribute(config)) continue;
        const json* names = FindPath(c, {"requests"});
        bool covers = names == nullptr || !names->is_array() || names->empty();
        if (!covers) {
          for (const json& n : *names) covers |= n.is_string() && n.get<std::string>() == request;
        }
        has_distinct |= covers;
      }
    }
    if (!has_selector || !has_distinct)
      return Error{where + " spreads over " + std::to_string(count) + " cards; it needs the selector '" +
                   selector +
                   "' (multi-card shares never share a card with "
                   "offline ones) and the constraint distinctAttribute: " +
                   UuidAttribute(config)};
  }
  return Status::Ok();
}

Result<Consumed> ReadConsumed(const json& result) {
  Consumed out;
  const json* capacity = FindPath(result, {"consumedCapacity"});
  if (capacity == nullptr || !capacity->is_object()) return out;
  auto cores = Asked(*capacity, kCores, false);
  auto reclaimed = Asked(*capacity, kReclaimedCores, false);
  auto memory = Asked(*capacity, kMemory, true);
  for (auto* r : {&cores, &reclaimed, &memory}) {
    if (!r->ok()) return Error{"consumedCapacity: " + r->message()};
  }
  out.cores = cores->value_or(0);
  out.reclaimed_cores = reclaimed->value_or(0);
  out.memory_mib = memory->value_or(0);
  return out;
}

Result<ClaimShare> ShareOf(const std::vector<AllocatedDevice>& devices, const Config& config,
                           std::string_view claim) {
  const std::string who = "claim " + std::string(claim);
  if (devices.empty()) return Error{who + " has no device of " + DriverName(config) + " allocated"};
  const AllocatedDevice& first = devices.front();
  const bool whole = first.device.variant == Variant::kWhole;
  for (const AllocatedDevice& d : devices) {
    if (PolicyOf(d.device.variant) != PolicyOf(first.device.variant))
      return Error{who + " holds devices of different kinds (" +
                   DeviceName(first.device.card_index, first.device.variant) + ", " +
                   DeviceName(d.device.card_index, d.device.variant) + "); one claim is one kind of share"};
    if (!whole && d.consumed != first.consumed)
      return Error{who + " holds different amounts on its cards; a share takes the same on each card"};
  }
  ClaimShare share;
  if (whole) {
    share.whole = true;
    share.policy = config.default_compute_policy;
    share.core_per_card = 100;
    share.memory_per_card_mib = first.capacity_mib;
    for (const AllocatedDevice& d : devices)
      share.memory_per_card_mib = std::min(share.memory_per_card_mib, d.capacity_mib);
    return share;
  }
  share.policy = *PolicyOf(first.device.variant);
  const Consumed& c = first.consumed;
  if (c.memory_mib <= 0) return Error{who + " consumed no memory; every share holds some"};
  share.memory_per_card_mib = c.memory_mib;
  if (c.cores > 0 && c.reclaimed_cores > 0)
    return Error{who + " consumed both cores and reclaimedCores; a share is online or offline, not both"};
  if (c.cores == 0 && c.reclaimed_cores == 0) {
    const bool all_memory = std::all_of(devices.begin(), devices.end(), [](const AllocatedDevice& d) {
      return d.consumed.memory_mib == d.capacity_mib;
    });
    if (!all_memory) return Error{who + " consumed no core; ask cores (online) or reclaimedCores (offline)"};
    // Alone on the card (no other share can get memory there): the whole compute is its own.
    share.whole = true;
    share.core_per_card = 100;
    return share;
  }
  const int64_t per_card = c.cores > 0 ? c.cores : c.reclaimed_cores;
  if (per_card < config.min_core_percent || per_card > 100)
    return Error{who + " consumed " + std::to_string(per_card) + " core per card; it must lie between " +
                 std::to_string(config.min_core_percent) + " and 100"};
  if (c.reclaimed_cores > 0) {
    if (devices.size() > 1)
      return Error{who + " is offline on " + std::to_string(devices.size()) +
                   " cards; offline shares take one"};
    share.qos = Qos::kOffline;
    share.reclaimed_core_per_card = static_cast<int>(per_card);
    return share;
  }
  if (devices.size() > 1) {
    for (const AllocatedDevice& d : devices) {
      if (OfflineShares(d.device.variant))
        return Error{who + " spreads over " + std::to_string(devices.size()) + " cards but got " +
                     DeviceName(d.device.card_index, d.device.variant) +
                     ", which takes offline shares; add the selector '" + MultiCardSelector(config) + "'"};
    }
  }
  share.core_per_card = static_cast<int>(per_card);
  return share;
}

Result<std::optional<ClaimFacts>> ReadClaim(const json& claim, const Config& config) {
  const std::string key = MetadataString(claim, "namespace") + "/" + MetadataString(claim, "name");
  const json* results = FindPath(claim, {"status", "allocation", "devices", "results"});
  if (results == nullptr || !results->is_array()) return std::optional<ClaimFacts>();
  const std::string driver = DriverName(config);
  ClaimFacts out{key, MetadataString(claim, "uid"), MetadataString(claim, "resourceVersion"), "", {}, {}};
  for (const json& r : *results) {
    if (StringAt(r, {"driver"}) != driver) continue;
    const std::string pool = StringAt(r, {"pool"}), device = StringAt(r, {"device"});
    if (!out.node.empty() && pool != out.node)
      return Error{"claim " + key + " holds devices of two pools (" + out.node + ", " + pool +
                   "); the driver's pool is one node's"};
    out.node = pool;
    const std::optional<DeviceRef> ref = ParseDeviceName(device);
    if (!ref) return Error{"claim " + key + " holds " + device + ", which is not a device name of " + driver};
    auto consumed = ReadConsumed(r);
    if (!consumed.ok()) return Error{"claim " + key + " device " + device + " " + consumed.message()};
    out.devices.push_back(AllocatedDevice{*ref, *consumed, 0});
    out.names.push_back({StringAt(r, {"request"}), device, StringAt(r, {"shareID"})});
  }
  if (out.devices.empty()) return std::optional<ClaimFacts>();
  return std::optional<ClaimFacts>(std::move(out));
}

Result<HeldShare> HeldOn(const ClaimFacts& claim, const NodeState& node, const Config& config) {
  std::vector<AllocatedDevice> devices = claim.devices;
  std::vector<const CardState*> cards;
  for (AllocatedDevice& d : devices) {
    auto card = std::find_if(node.cards.begin(), node.cards.end(),
                             [&](const CardState& c) { return c.card.index == d.device.card_index; });
    if (card == node.cards.end())
      return Error{"claim " + claim.key + " holds " + DeviceName(d.device.card_index, d.device.variant) +
                   ", a card node " + node.name + " does not have"};
    d.capacity_mib = card->capacity_mib;
    cards.push_back(&*card);
  }
  Result<ClaimShare> share = ShareOf(devices, config, claim.key);
  if (!share.ok()) return share.error();
  const auto slash = claim.key.find('/');
  HeldShare out;
  PodRequest& r = out.request;
  r.namespace_name = claim.key.substr(0, slash);
  r.name = claim.key.substr(slash + 1);
  r.uid = claim.uid;
  r.qos = share->qos;
  r.dedicated = share->whole;
  r.compute_policy = share->policy;
  const int n = static_cast<int>(cards.size());
  r.containers.push_back(ContainerRequest{std::string(kRequestName), false, share->core_per_card * n,
                                          share->reclaimed_core_per_card * n, share->memory_per_card_mib * n,
                                          n});
  ContainerAssignment& held = out.assignment.containers.emplace_back();
  held.container = kRequestName;
  for (const CardState* c : cards)
    held.cards.push_back(
        {c->card.uuid, share->core_per_card, share->reclaimed_core_per_card, share->memory_per_card_mib});
  return out;
}

Result<std::optional<ClaimsAsLimits>> LimitsOfClaims(const json& pod, const std::map<std::string, json>& specs,
                                                     const Config& config) {
  const ResourceNames names = config.Names();
  const std::string key = MetadataString(pod, "namespace") + "/" + MetadataString(pod, "name");
  // The driver's share in one claim spec, nullopt when it asks none (CheckClaimSpec passed it: at most one
  // request of the driver's classes, its amounts readable).
  const auto asked = [&](const json& spec, const std::string& claim) -> Result<std::optional<AskedShare>> {
    const std::string what = "pod " + key + " claim " + claim;
    if (Status s = CheckClaimSpec(spec, config, what); !s.ok()) return Error{s.message()};
    const json* requests = FindPath(spec, {"devices", "requests"});
    for (const json& r : requests && requests->is_array() ? *requests : json::array()) {
      const std::string class_name = StringAt(r, {"exactly", "deviceClassName"});
      if (!IsDriverClass(class_name, config)) continue;
      AskedShare share;
      if (const json* n = FindPath(r, {"exactly", "count"}); n && n->is_number_integer()) share.count = *n;
      share.policy = ClassPolicy(class_name, config);
      if (!share.policy) {
        share.qos = "dedicated_cores";
        return std::optional<AskedShare>(share);
      }
      const json* capacities = FindPath(r, {"exactly", "capacity", "requests"});
      const int64_t cores = Asked(*capacities, kCores, false)->value_or(0);
      share.qos = cores > 0 ? "shared_cores" : "reclaimed_cores";
      share.core_per_card = cores > 0 ? cores : Asked(*capacities, kReclaimedCores, false)->value_or(0);
      share.memory_mib = Asked(*capacities, kMemory, true)->value_or(0);
      return std::optional<AskedShare>(share);
    }
    return std::optional<AskedShare>();
  };
  ClaimsAsLimits out;
  std::optional<AskedShare> first;
  std::string first_container;
  std::set<std::string> counted;
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = FindPath(pod, {"spec", list});
    for (const json& container : containers && containers->is_array() ? *containers : json::array()) {
      const std::string name = StringAt(container, {"name"});
      std::vector<AskedShare> shares;
      const json* claims = FindPath(container, {"resources", "claims"});
      for (const json& c : claims && claims->is_array() ? *claims : json::array()) {
        const std::string claim = StringAt(c, {"name"});
        auto spec = specs.find(claim);
        if (spec == specs.end() || !counted.insert(claim).second) continue;
        Result<std::optional<AskedShare>> share = asked(spec->second, claim);
        if (!share.ok()) return share.error();
        if (*share) shares.push_back(**share);
      }
      if (std::optional<int64_t> cards = WholeCardsAsked(container, config)) {
        shares.push_back({.qos = "dedicated_cores", .policy = std::nullopt, .count = *cards});
        out.extended_resource = true;
      }
      if (shares.empty()) continue;
      if (shares.size() > 1)
        return Error{"pod " + key + " container " + name + " holds " + std::to_string(shares.size()) +
                     " shares of " + DriverName(config) + " classes; mgpu counts one claim per container"};
      const AskedShare& share = shares.front();
      if (!first) {
        first = share;
        first_container = name;
      } else if (share.qos != first->qos || share.policy != first->policy || share.count != first->count) {
        return Error{"pod " + key + " asks " + first->Text() + " in container " + first_container + " but " +
                     share.Text() + " in container " + name +
                     "; one mgpu pod is one kind of share on one number of cards"};
      }
      const int64_t unit = std::max<int64_t>(1, config.memory_unit_mib);
      const int64_t units = share.policy ? (share.memory_mib + unit - 1) / unit : 1;
      std::map<std::string, std::string>& limits = out.limits[name];
      const bool offline = share.qos == "reclaimed_cores";
      limits[offline ? names.reclaimed_core : names.core] = std::to_string(share.core_per_card * share.count);
      limits[names.memory] = std::to_string(units * share.count);
    }
  }
  if (!first) return std::optional<ClaimsAsLimits>();
  out.annotations[std::string(kQosLevelAnnotation)] = first->qos;
  if (first->policy) out.annotations[names.compute_policy] = std::string(Name(*first->policy));
  out.annotations[names.gpu_count] = std::to_string(first->count);
  return std::optional<ClaimsAsLimits>(std::move(out));
}

json DraLimitsOf(const json& pod, const PodRequest& request, const Config& config) {
  const ResourceNames names = config.Names();
  json out = json::object();
  for (const ContainerRequest& c : request.containers) {
    const PodContainer at = FindContainer(pod, c);
    if (at.object == nullptr) continue;
    json& limits = out[c.name] = json::object();
    for (const char* kind : {"requests", "limits"}) {  // limits win; requests alone stand for them
      const json* amounts = FindPath(*at.object, {"resources", kind});
      if (amounts == nullptr || !amounts->is_object()) continue;
      for (const std::string& r : {names.core, names.reclaimed_core})
        if (amounts->contains(r)) limits[r] = (*amounts)[r];
    }
    // In devices, as every reader of a stored pod counts D/mgpu-memory (request.h, MemoryCount).
    if (c.memory_mib > 0)
      limits[names.memory] = std::to_string(c.memory_mib / std::max<int64_t>(1, config.memory_unit_mib));
  }
  return out;
}

Result<std::optional<json>> WithDraLimits(const json& pod, const Config& config) {
  const ResourceNames names = config.Names();
  const Annotations annotations = AnnotationsOf(pod);
  auto it = annotations.find(names.dra_limits);
  if (it == annotations.end()) return std::optional<json>();
  const std::string bad = "the " + names.dra_limits + " annotation ";
  json limits = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!limits.is_object()) return Error{bad + "is not a JSON object of containers"};
  json out = pod;
  size_t restored = 0;
  for (const char* list : {"initContainers", "containers"}) {
    json* containers = out.contains("spec") && out["spec"].is_object() && out["spec"].contains(list)
                           ? &out["spec"][list]
                           : nullptr;
    if (containers == nullptr || !containers->is_array()) continue;
    for (json& container : *containers) {
      if (!container.is_object()) continue;
      auto asked = limits.find(StringAt(container, {"name"}));
      if (asked == limits.end()) continue;
      if (!asked->is_object()) return Error{bad + "gives container " + asked.key() + " no object"};
      json& resources = container["resources"];
      if (!resources.is_object()) resources = json::object();
      for (const char* kind : {"limits", "requests"})
        if (resources.contains(kind) && resources[kind].is_object())
          resources[kind].erase(names.dra_resource);
      if (!resources.contains("limits") || !resources["limits"].is_object())
        resources["limits"] = json::object();
      for (const auto& [r, v] : asked->items()) {
        if (r != names.core && r != names.reclaimed_core && r != names.memory)
          return Error{bad + "names " + r + ", which is not an mgpu resource"};
        resources["limits"][r] = v;
      }
      ++restored;
    }
  }
  if (restored != limits.size()) return Error{bad + "names a container the pod does not have"};
  return std::optional<json>(std::move(out));
}

}  // namespace mgpu::dra
