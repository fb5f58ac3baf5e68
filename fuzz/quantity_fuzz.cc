// Kubernetes quantities ("500m", "1.5Gi", "2e3") as the request rules read them. Property: the three
// readings agree where they overlap.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/quantity.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const mgpu::Result<int64_t> whole = mgpu::ParseWholeQuantity(text);
  const mgpu::Result<int64_t> milli = mgpu::ParseMilliQuantity(text);
  const mgpu::Result<int64_t> mebi = mgpu::ParseMebiQuantity(text);
  if (whole.ok()) {
    MGPU_FUZZ_CHECK(*whole >= 0);
    if (*whole <= INT64_MAX / 1000) MGPU_FUZZ_CHECK(milli.ok() && *milli == *whole * 1000);
    constexpr int64_t kMebi = int64_t{1} << 20;
    MGPU_FUZZ_CHECK(mebi.ok() && *mebi == *whole / kMebi + (*whole % kMebi != 0));
  }
  if (milli.ok()) MGPU_FUZZ_CHECK(*milli >= 0);
  if (mebi.ok()) MGPU_FUZZ_CHECK(*mebi >= 0);
  return 0;
}
