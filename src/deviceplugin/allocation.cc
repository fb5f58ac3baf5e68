#include "deviceplugin/allocation.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_set>

#include "common/allocator.h"

namespace mgpu::dp {
namespace {

// The kubelet's available IDs of one resource on one card, as ordinals.
struct CardDevices {
  std::vector<int64_t> available;     // sorted, without repeats
  std::vector<int64_t> must_include;  // sorted, without repeats
  // Distinct devices on the card the kubelet offers: available and must-include together.
  int64_t Offered() const {
    int64_t extra = 0;
    for (int64_t m : must_include) extra += !std::binary_search(available.begin(), available.end(), m);
    return static_cast<int64_t>(available.size()) + extra;
  }
};

void SortUnique(std::vector<int64_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// SortUnique for ordinals below `bound` (a card's device count), in linear time: the kubelet lists IDs in
// string order ("m10" before "m2"), tens of thousands of them for memory.
void SortUniqueBelow(std::vector<int64_t>& v, int64_t bound) {
  std::vector<bool> present(static_cast<size_t>(bound));
  for (int64_t x : v) present[static_cast<size_t>(x)] = true;
  v.clear();
  for (int64_t x = 0; x < bound; ++x)
    if (present[static_cast<size_t>(x)]) v.push_back(x);
}

std::string Name(Resource resource) { return std::string(ShortName(resource)); }


Result<std::map<std::string, CardDevices>> GroupByCard(Resource resource, const PreferredRequest& request,
                                                       const std::vector<Card>& cards, const Config& config) {
  std::map<std::string, CardDevices> out;
  const Card* card = nullptr;
  CardDevices* devices = nullptr;
  const auto add = [&](std::string_view id, const char* list, bool must) -> Status {
    auto read = ReadDeviceId(id, resource, cards, config, card);
    if (!read.ok()) return Error{std::string(list) + " " + read.message()};
    if (read->card != card) {
      card = read->card;
      devices = &out[card->uuid];
    }
    (must ? devices->must_include : devices->available).push_back(read->ordinal);
    return Status::Ok();
  };
  for (std::string_view id : request.available) {
    if (Status s = add(id, "available", false); !s) return Error{s.message()};
  }
  for (std::string_view id : request.must_include) {
    if (Status s = add(id, "must-include", true); !s) return Error{s.message()};
  }
  for (auto& [uuid, d] : out) {
    SortUniqueBelow(d.available, DevicesPerCard(*FindCard(cards, uuid), resource, config));
    SortUnique(d.must_include);
  }
  return out;
}

using Amounts = std::vector<std::pair<std::string, int64_t>>;  // card uuid → devices, in card order

// Whether `amounts` can be taken: each card offers that many devices, holding no more must-include IDs than
// its amount, and no must-include ID lies on another card.
bool CanTake(const std::map<std::string, CardDevices>& by_card, const Amounts& amounts) {
  std::set<std::string> chosen;
  for (const auto& [uuid, n] : amounts) chosen.insert(uuid);
  for (const auto& [uuid, d] : by_card) {
    if (!d.must_include.empty() && !chosen.count(uuid)) return false;
  }
  for (const auto& [uuid, n] : amounts) {
    auto it = by_card.find(uuid);
    if (it == by_card.end() || static_cast<int64_t>(it->second.must_include.size()) > n ||
        it->second.Offered() < n)
      return false;
  }
  return true;
}

// The IDs of `amounts` (CanTake must hold): on each card its must-include IDs, then the lowest available.
std::vector<std::string> Take(const std::map<std::string, CardDevices>& by_card, Resource resource,
                              const Amounts& amounts) {
  std::vector<std::string> out;
  for (const auto& [uuid, n] : amounts) {
    const CardDevices& d = by_card.at(uuid);
    int64_t left = n;
    for (int64_t m : d.must_include) {
      out.push_back(DeviceId(uuid, resource, m));
      --left;
    }
    for (auto it = d.available.begin(); left > 0 && it != d.available.end(); ++it) {
      if (std::binary_search(d.must_include.begin(), d.must_include.end(), *it)) continue;
      out.push_back(DeviceId(uuid, resource, *it));
      --left;
    }
  }
  return out;
}

// The candidate's devices per card for `resource`, in card order; empty when they do not add up to `size`.
Amounts AmountsOf(const PendingContainer& c, Resource resource, int64_t size, const Config& config) {
  Amounts out;
  int64_t total = 0;
  for (const CardShare& s : c.cards) {
    const int64_t n = DevicesOf(s, resource, config);
    if (n < 0) return {};
    if (n == 0) continue;
    out.emplace_back(s.uuid, n);
    total += n;
  }
  if (total != size) return {};
  return out;
}

bool SameCards(const Amounts& amounts, const std::set<std::string>& cards) {
  if (cards.empty() || amounts.size() != cards.size()) return false;
  for (const auto& [uuid, n] : amounts) {
    if (!cards.count(uuid)) return false;
  }
  return true;
}

// No candidate: the shared allocator chooses, seeing as free only what the kubelet says is available.
Result<std::vector<std::string>> Fallback(Resource resource, const PreferredRequest& request,
                                          const std::map<std::string, CardDevices>& by_card,
                                          const std::set<std::string>& just_allocated,
                                          const std::vector<Card>& cards, const Config& config) {
  // The cards another resource of this container just got, when they can take an equal share each.
  const int64_t hinted = static_cast<int64_t>(just_allocated.size());
  if (hinted > 0 && request.size % hinted == 0) {
    Amounts amounts;
    for (const std::string& uuid : just_allocated) amounts.emplace_back(uuid, request.size / hinted);
    if (CanTake(by_card, amounts)) return Take(by_card, resource, amounts);
  }

  const int64_t unit = UnitOf(resource, config);
  NodeInventory inventory;
  inventory.cards = cards;
  inventory.memory_unit_mib = config.memory_unit_mib;
  NodeState node = MakeNodeState("", inventory, config);
  for (CardState& c : node.cards) {
    auto it = by_card.find(c.card.uuid);
    const int64_t free = it == by_card.end() ? 0 : it->second.Offered();
    switch (resource) {
      case Resource::kCore:
        c.usage.core = static_cast<int>(100 - std::min<int64_t>(100, free));
        break;
      case Resource::kReclaimedCore:
        c.usage.reclaimed_core = static_cast<int>(100 - std::min<int64_t>(100, free));
        break;
      case Resource::kMemory:
        c.usage.memory_mib = std::max<int64_t>(0, c.capacity_mib - free * unit);
        break;
    }
  }
  PodRequest pod;
  pod.name = "(admitted without the scheduler extender)";
  pod.qos = resource == Resource::kReclaimedCore ? Qos::kOffline : Qos::kOnline;
  pod.compute_policy = config.default_compute_policy;
  pod.card_policy = config.default_card_policy;
  ContainerRequest c;
  c.name = "(" + Name(resource) + " " + std::to_string(request.size) + ")";
  if (resource == Resource::kMemory) {
    c.memory_mib = request.size * unit;
  } else {
    if (request.size > 100 && request.size % 100 != 0) {
      return Error{"cannot split " + std::to_string(request.size) + " " + Name(resource) +
                   " over whole cards: above 100 it must be a multiple of 100"};
    }
    c.card_count = request.size > 100 ? static_cast<int>(request.size / 100) : 1;
    (resource == Resource::kCore ? c.core : c.reclaimed_core) = static_cast<int>(request.size);
  }
  pod.containers.push_back(c);
  auto assignment = ChooseCards(node, pod);
  if (!assignment.ok()) return Error{"no candidate pod and " + assignment.message()};
  Amounts amounts;
  for (const CardShare& s : assignment->containers.front().cards) {
    amounts.emplace_back(s.uuid, request.size / c.card_count);
  }
  if (!CanTake(by_card, amounts)) {
    return Error{
        "no candidate pod, and the must-include device IDs lie on other cards than the allocator chose"};
  }
  return Take(by_card, resource, amounts);
}

}  // namespace

Result<Preference> ChoosePreferred(Resource resource, const PreferredRequest& request,
                                   const std::vector<PendingContainer>& candidates,
                                   const std::vector<std::string>& just_allocated,
                                   const std::vector<Card>& cards, const Config& config) {
  if (request.size <= 0) return Error{"allocation size " + std::to_string(request.size) + " is not positive"};
  auto by_card = GroupByCard(resource, request, cards, config);
  if (!by_card.ok()) return by_card.error();
  const std::set<std::string> hint(just_allocated.begin(), just_allocated.end());

  struct Fit {
    const PendingContainer* candidate;
    bool after_other_resource;
    Amounts amounts;
  };
  std::vector<Fit> fits;
  for (const PendingContainer& c : candidates) {
    Amounts amounts = AmountsOf(c, resource, request.size, config);
    if (amounts.empty() || !CanTake(*by_card, amounts)) continue;
    const bool paired = SameCards(amounts, hint);
    fits.push_back(Fit{&c, paired, std::move(amounts)});
  }
  if (!fits.empty()) {
    auto best = std::min_element(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) {
      if (a.after_other_resource != b.after_other_resource) return a.after_other_resource;
      if (a.candidate->assume_time_ns != b.candidate->assume_time_ns)
        return a.candidate->assume_time_ns < b.candidate->assume_time_ns;
      if (a.candidate->pod != b.candidate->pod) return a.candidate->pod < b.candidate->pod;
      if (a.candidate->order != b.candidate->order) return a.candidate->order < b.candidate->order;
      return a.candidate->container < b.candidate->container;
    });
    return Preference{Take(*by_card, resource, best->amounts), best->candidate->pod,
                      best->candidate->container};
  }
  auto ids = Fallback(resource, request, *by_card, hint, cards, config);
  if (!ids.ok()) return ids.error();
  return Preference{std::move(*ids), "", ""};
}

}  // namespace mgpu::dp
