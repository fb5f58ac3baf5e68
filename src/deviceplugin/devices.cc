#include "deviceplugin/devices.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <unordered_set>

namespace mgpu::dp {

namespace {

char Letter(Resource resource) {
  switch (resource) {
    case Resource::kCore:
      return 'c';
    case Resource::kMemory:
      return 'm';
    case Resource::kReclaimedCore:
      return 'r';
  }
  return '?';
}

std::string Name(Resource resource) { return std::string(ShortName(resource)); }

}  // namespace

std::string DeviceId(std::string_view card_uuid, Resource resource, int64_t ordinal) {
  std::string id(card_uuid);
  id += '-';
  id += Letter(resource);
  id += std::to_string(ordinal);
  return id;
}

Result<ParsedDeviceId> ParseDeviceId(std::string_view id) {
  const size_t dash = id.rfind('-');
  const auto bad = [&] {
    return Error{"device ID \"" + std::string(id) + "\" is not <card uuid>-<c|m|r><number>"};
  };
  if (dash == std::string_view::npos || dash == 0 || dash + 2 >= id.size()) return bad();
  ParsedDeviceId out;
  switch (id[dash + 1]) {
    case 'c':
      out.resource = Resource::kCore;
      break;
    case 'm':
      out.resource = Resource::kMemory;
      break;
    case 'r':
      out.resource = Resource::kReclaimedCore;
      break;
    default:
      return bad();
  }
  const std::string_view digits = id.substr(dash + 2);
  if (digits.size() > 1 && digits[0] == '0') return bad();  // one spelling per ordinal
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.ordinal);
  if (ec != std::errc() || end != digits.data() + digits.size() || out.ordinal < 0) return bad();
  out.card_uuid = id.substr(0, dash);
  return out;
}

int64_t DevicesPerCard(const Card& card, Resource resource, const Config& config) {
  if (resource != Resource::kMemory) return 100;
  const int64_t usable = std::max<int64_t>(0, card.memory_mib - config.reserved_memory_mib);
  return usable / std::max<int64_t>(1, config.memory_unit_mib);
}

int64_t UnitOf(Resource resource, const Config& config) {
  return resource == Resource::kMemory ? std::max<int64_t>(1, config.memory_unit_mib) : 1;
}

int64_t DevicesOf(const CardShare& share, Resource resource, const Config& config) {
  switch (resource) {
    case Resource::kCore:
      return share.core;
    case Resource::kReclaimedCore:
      return share.reclaimed_core;
    case Resource::kMemory: {
      const int64_t unit = UnitOf(resource, config);
      return share.memory_mib % unit == 0 ? share.memory_mib / unit : -1;
    }
  }
  return -1;
}

int64_t DevicesOf(const ContainerRequest& request, Resource resource, const Config& config) {
  return DevicesOf(CardShare{"", request.core, request.reclaimed_core, request.memory_mib}, resource, config);
}

const Card* FindCard(const std::vector<Card>& cards, std::string_view uuid) {
  for (const Card& c : cards) {
    if (c.uuid == uuid) return &c;
  }
  return nullptr;
}

Result<ReadDevice> ReadDeviceId(std::string_view id, Resource resource, const std::vector<Card>& cards,
                                const Config& config, const Card* hint) {
  auto parsed = ParseDeviceId(id);
  if (!parsed.ok()) return parsed.error();
  if (parsed->resource != resource) {
    return Error{"device ID " + std::string(id) + " is a " + Name(parsed->resource) +
                 " device, asked for as " + Name(resource)};
  }
  const Card* card = hint && hint->uuid == parsed->card_uuid ? hint : FindCard(cards, parsed->card_uuid);
  if (!card) {
    return Error{"device ID " + std::string(id) + " names card " + std::string(parsed->card_uuid) +
                 ", which this node does not have"};
  }
  if (parsed->ordinal >= DevicesPerCard(*card, resource, config)) {
    return Error{"device ID " + std::string(id) + " is beyond the " +
                 std::to_string(DevicesPerCard(*card, resource, config)) + " " + Name(resource) +
                 " devices of card " + card->uuid};
  }
  return ReadDevice{card, parsed->ordinal};
}

Result<node::ResourceAllocation> ReadAllocation(Resource resource, const std::vector<std::string>& device_ids,
                                                const std::vector<Card>& cards, const Config& config) {
  if (device_ids.empty()) return Error{"Allocate asked for no " + Name(resource) + " devices"};
  std::map<int, int64_t> count_by_index;  // card index → devices
  std::unordered_set<std::string_view> seen;
  seen.reserve(device_ids.size());
  node::ResourceAllocation out;
  out.resource = resource;
  const Card* card = nullptr;
  for (const std::string& id : device_ids) {
    if (!seen.insert(id).second) return Error{"device ID " + id + " is asked for twice"};
    auto read = ReadDeviceId(id, resource, cards, config, card);
    if (!read.ok()) return read.error();
    card = read->card;
    if (!card->healthy) {
      return Error{"device ID " + id + " is on card " + card->uuid + " (index " +
                   std::to_string(card->index) + "), which is unhealthy"};
    }
    if (count_by_index[card->index]++ == 0) out.cards.push_back(*card);
  }
  std::sort(out.cards.begin(), out.cards.end(),
            [](const Card& a, const Card& b) { return a.index < b.index; });
  const int64_t first = count_by_index[out.cards.front().index];
  for (const Card& c : out.cards) {
    if (count_by_index[c.index] != first) {
      return Error{"the " + Name(resource) + " device IDs give card " + out.cards.front().uuid + " " +
                   std::to_string(first) + " and card " + c.uuid + " " +
                   std::to_string(count_by_index[c.index]) +
                   "; a container takes an equal share of each of its cards"};
    }
  }
  out.per_card = first * UnitOf(resource, config);
  return out;
}

}  // namespace mgpu::dp
