#include "deviceplugin/device_list.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>

namespace mgpu::dp {

namespace {
constexpr const char* kHealthy = "Healthy";
constexpr const char* kUnhealthy = "Unhealthy";
}  // namespace

v1beta1::ListAndWatchResponse BuildDeviceList(const std::vector<Card>& cards, Resource resource,
                                              const Config& config) {
  v1beta1::ListAndWatchResponse out;
  for (const Card& card : cards) {
    const int64_t n = DevicesPerCard(card, resource, config);
    for (int64_t k = 0; k < n; ++k) {
      v1beta1::Device* d = out.add_devices();
      d->set_id(DeviceId(card.uuid, resource, k));
      d->set_health(card.healthy ? kHealthy : kUnhealthy);
    }
  }
  return out;
}

size_t WorstCaseListBytes(const std::vector<Card>& cards, Resource resource, const Config& config) {
  using google::protobuf::io::CodedOutputStream;
  // Devices of one card differ only in their ordinal's digits: size one device per digit count.
  size_t total = 0;
  for (const Card& card : cards) {
    const int64_t n = DevicesPerCard(card, resource, config);
    for (int64_t first = 0, last = 10; first < n; first = last, last *= 10) {
      v1beta1::Device d;
      d.set_id(DeviceId(card.uuid, resource, first));
      d.set_health(kUnhealthy);
      const size_t device = d.ByteSizeLong();
      const size_t field = 1 + CodedOutputStream::VarintSize64(device) + device;  // tag, length, message
      total += field * static_cast<size_t>(std::min(n, last) - first);
    }
  }
  return total;
}

int64_t SmallestMemoryUnit(const std::vector<Card>& cards, const Config& config) {
  // The size falls as the unit grows: the smallest unit that fits, by bisection.
  Config c = config;
  int64_t lo = config.memory_unit_mib, hi = config.memory_unit_mib;
  for (c.memory_unit_mib = hi; WorstCaseListBytes(cards, Resource::kMemory, c) > kMaxListAndWatchBytes;)
    lo = hi, c.memory_unit_mib = hi *= 2;
  if (hi == config.memory_unit_mib) return hi;
  while (hi - lo > 1) {
    c.memory_unit_mib = lo + (hi - lo) / 2;
    (WorstCaseListBytes(cards, Resource::kMemory, c) > kMaxListAndWatchBytes ? lo : hi) = c.memory_unit_mib;
  }
  return hi;
}

Status CheckListAndWatchSize(const std::vector<Card>& cards, const Config& config) {
  const size_t bytes = WorstCaseListBytes(cards, Resource::kMemory, config);
  if (bytes <= kMaxListAndWatchBytes) return Status::Ok();
  const int64_t hi = SmallestMemoryUnit(cards, config);
  int64_t devices = 0;
  for (const Card& card : cards) devices += DevicesPerCard(card, Resource::kMemory, config);
  return Error{"the mgpu-memory device list would be " + std::to_string(bytes) + " bytes (" +
               std::to_string(devices) + " devices at memoryUnitMiB " +
               std::to_string(config.memory_unit_mib) + "), over the kubelet's limit of " +
               std::to_string(kMaxListAndWatchBytes) + " bytes; set memoryUnitMiB to " + std::to_string(hi) +
               " or more"};
}

}  // namespace mgpu::dp
