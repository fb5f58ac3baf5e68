// Device IDs as the kubelet sends them in Allocate and GetPreferredAllocation: the input is one ID per
// line; the first byte picks the resource and the size asked for.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deviceplugin/allocation.h"
#include "deviceplugin/devices.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mgpu::dp;
  if (size == 0) return 0;
  const mgpu::Resource resource = mgpu::kAllResources[data[0] % 3];
  const int64_t wanted = data[0] / 3;
  std::vector<std::string> ids;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ids.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& id : ids) {
    const mgpu::Result<ParsedDeviceId> parsed = ParseDeviceId(id);
    if (parsed.ok()) MGPU_FUZZ_CHECK(DeviceId(parsed->card_uuid, parsed->resource, parsed->ordinal) == id);
  }
  static const mgpu::Config config;
  static const std::vector<mgpu::Card> cards = {{0, "GPU-a", "Test GPU", 16384, true},
                                                {1, "GPU-b", "Test GPU", 8192, true},
                                                {2, "GPU-c", "Test GPU", 8192, false}};
  (void)ReadAllocation(resource, ids, cards, config);
  PreferredRequest request;
  for (const std::string& id : ids) request.available.push_back(id);
  request.size = wanted;
  if (!request.available.empty()) request.must_include.push_back(request.available.front());
  PendingContainer pending;
  pending.pod = "default/p";
  pending.container = "c";
  pending.cards = {mgpu::CardShare{"GPU-a", 30, 0, 1024}};
  (void)ChoosePreferred(resource, request, {pending}, {"GPU-b"}, cards, config);
  return 0;
}
