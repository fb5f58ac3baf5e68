#include "dra/slices.h"

#include <algorithm>

#include "common/dra.h"
#include "common/json_path.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

constexpr const char* kApiVersion = "resource.k8s.io/v1";

json Int(int64_t v) { return {{"int", v}}; }
json Str(const std::string& v) { return {{"string", v}}; }
json Bool(bool v) { return {{"bool", v}}; }

// One of the card's "sharing" counter: what its counter set holds and what each of its devices consumes.
json SharingCounter() { return {{std::string(kSharingCounter), {{"value", "1"}}}}; }

json CoreCapacity() {
  return {
      {"value", "100"},
      {"requestPolicy", {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}};
}

json MemoryCapacity(int64_t capacity_mib, const Config& config) {
  const std::string value = MemoryQuantity(capacity_mib);
  const std::string unit = MemoryQuantity(config.memory_unit_mib);
  return {{"value", value},
          {"requestPolicy",
           {{"default", value}, {"validRange", {{"min", unit}, {"max", value}, {"step", unit}}}}}};
}

json DeviceOf(const NodeCard& c, Variant v, const Config& config) {
  const std::string driver = DriverName(config);
  json attributes = {{"uuid", Str(c.card.uuid)},
                     {"index", Int(c.card.index)},
                     {"model", Str(c.card.model)},
                     {"product", Str(LabelValue(c.card.model))},
                     {"memoryMiB", Int(c.card.memory_mib)},
                     {"offlineShares", Bool(OfflineShares(v))},
                     {"wholeCard", Bool(WholeCardDevice(v, config))}};
  if (auto policy = PolicyOf(v)) attributes["computePolicy"] = Str(std::string(Name(*policy)));
  if (!c.pci_bus_id.empty()) attributes["pciBusID"] = Str(c.pci_bus_id);
  json device = {{"name", DeviceName(c.card.index, v)}, {"attributes", std::move(attributes)}};
  if (Shareable(v)) {
    device["allowMultipleAllocations"] = true;
    json capacity = {{std::string(kCores), CoreCapacity()},
                     {std::string(kMemory), MemoryCapacity(c.capacity_mib, config)}};
    if (OfflineShares(v)) capacity[std::string(kReclaimedCores)] = CoreCapacity();
    device["capacity"] = std::move(capacity);
  } else {
    device["capacity"] = {{std::string(kCores), {{"value", "100"}}},
                          {std::string(kReclaimedCores), {{"value", "100"}}},
                          {std::string(kMemory), {{"value", MemoryQuantity(c.capacity_mib)}}}};
  }
  if (SharedCounters(config)) {
    device["consumesCounters"] =
        json::array({{{"counterSet", CounterSetName(c.card.index)}, {"counters", SharingCounter()}}});
  }
  if (!c.card.healthy) {
    device["taints"] = json::array({{{"key", driver + "/unhealthy"}, {"effect", "NoSchedule"}}});
  }
  return device;
}

json Slice(const std::string& name, const std::string& node, const Config& config, int64_t generation,
           int64_t count) {
  return {{"apiVersion", kApiVersion},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"driver", DriverName(config)},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", count}}}}}};
}

}  // namespace

std::vector<json> BuildSlices(const std::string& node, const std::vector<NodeCard>& cards,
                              const Config& config, int64_t generation) {
  std::vector<json> out;
  const size_t groups = std::max<size_t>(1, (cards.size() + kCardsPerSlice - 1) / kCardsPerSlice);
  const bool with_counters = SharedCounters(config);
  const int64_t count = static_cast<int64_t>(cards.empty() ? 1 : (with_counters ? 2 : 1) * groups);
  const std::string prefix = node + "-" + DriverName(config) + "-";
  if (cards.empty()) {
    // A pool with no devices says so: the node has no cards. (No empty list: the API server drops it.)
    out.push_back(Slice(prefix + "devices-0", node, config, generation, count));
    return out;
  }
  const std::vector<Variant> variants = PublishedVariants(config);
  for (size_t g = 0; g < groups; ++g) {
    json sets = json::array(), list = json::array();
    for (size_t i = g * kCardsPerSlice; i < std::min(cards.size(), (g + 1) * kCardsPerSlice); ++i) {
      if (with_counters)
        sets.push_back({{"name", CounterSetName(cards[i].card.index)}, {"counters", SharingCounter()}});
      for (Variant v : variants) list.push_back(DeviceOf(cards[i], v, config));
    }
    if (with_counters) {
      json counters = Slice(prefix + "counters-" + std::to_string(g), node, config, generation, count);
      counters["spec"]["sharedCounters"] = std::move(sets);
      out.push_back(std::move(counters));
    }
    json devices = Slice(prefix + "devices-" + std::to_string(g), node, config, generation, count);
    devices["spec"]["devices"] = std::move(list);
    out.push_back(std::move(devices));
  }
  return out;
}

bool SameSpec(const json& stored, const json& wanted) {
  const json* a = FindPath(stored, {"spec"});
  const json* b = FindPath(wanted, {"spec"});
  if (a == nullptr || b == nullptr) return false;
  json x = *a, y = *b;
  for (json* s : {&x, &y}) {
    if (s->contains("pool") && (*s)["pool"].is_object()) (*s)["pool"].erase("generation");
    if (!s->contains("devices") || !(*s)["devices"].is_array()) continue;
    for (json& d : (*s)["devices"]) {
      if (!d.is_object() || !d.contains("taints") || !d["taints"].is_array()) continue;
      for (json& t : d["taints"]) {
        if (t.is_object()) t.erase("timeAdded");
      }
    }
  }
  return x == y;
}

}  // namespace mgpu::dra
