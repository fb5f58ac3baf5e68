#include "deviceplugin/devices.h"

#include <algorithm>
#include <charconv>

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

}  // namespace mgpu::dp
