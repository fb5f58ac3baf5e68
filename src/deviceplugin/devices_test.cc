#include "deviceplugin/devices.h"

#include <gtest/gtest.h>

namespace mgpu::dp {
namespace {

TEST(DeviceId, RoundTripsEveryResource) {
  for (Resource r : kAllResources) {
    const std::string id = DeviceId("GPU-1234-abcd", r, 42);
    auto parsed = ParseDeviceId(id);
    ASSERT_TRUE(parsed.ok()) << parsed.message();
    EXPECT_EQ(parsed->card_uuid, "GPU-1234-abcd");
    EXPECT_EQ(parsed->resource, r);
    EXPECT_EQ(parsed->ordinal, 42);
  }
  EXPECT_EQ(DeviceId("GPU-a", Resource::kMemory, 7), "GPU-a-m7");
}

TEST(DeviceId, RejectsMalformedIds) {
  for (const char* id : {"", "GPU", "GPU-", "GPU-x1", "GPU-c", "GPU-c-1", "GPU-c01", "GPU-c1a", "-c1"}) {
    auto parsed = ParseDeviceId(id);
    EXPECT_FALSE(parsed.ok()) << id;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.message().find("is not <card uuid>"), std::string::npos);
    }
  }
}

TEST(DevicesPerCard, MemoryFollowsUnitAndReserve) {
  Config c;
  c.memory_unit_mib = 256;
  c.reserved_memory_mib = 1000;
  const Card card{0, "GPU-a", "A10", 24576, true};
  EXPECT_EQ(DevicesPerCard(card, Resource::kCore, c), 100);
  EXPECT_EQ(DevicesPerCard(card, Resource::kReclaimedCore, c), 100);
  EXPECT_EQ(DevicesPerCard(card, Resource::kMemory, c), (24576 - 1000) / 256);
}

}  // namespace
}  // namespace mgpu::dp
