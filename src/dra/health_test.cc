#include "dra/health.h"

#include <gtest/gtest.h>

namespace mgpu::dra {
namespace {

TEST(HealthMessage, SixDevicesPerCardWithTheCardsHealth) {
  Config config;
  config.dra.cards = "any";  // the opt-in six-device layout
  const auto m = HealthMessage("node-a", {Card{0, "GPU-a", "m", 1, true}, Card{3, "GPU-d", "m", 1, false}},
                               PublishedVariants(config), 1700000000);
  ASSERT_EQ(m.devices_size(), 12);
  EXPECT_EQ(m.devices(0).device().device_name(), "gpu-0-fixed");
  EXPECT_EQ(m.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(m.devices(0).message(), "");
  EXPECT_EQ(m.devices(6).device().device_name(), "gpu-3-fixed");
  EXPECT_EQ(m.devices(11).device().device_name(), "gpu-3-whole");
  for (int i = 6; i < 12; ++i) {
    EXPECT_EQ(m.devices(i).health(), v1alpha1::UNHEALTHY);
    EXPECT_EQ(m.devices(i).device().pool_name(), "node-a");
    EXPECT_EQ(m.devices(i).last_updated_time(), 1700000000);
  }
  EXPECT_NE(m.devices(6).message().find("GPU-d"), std::string::npos);
}

TEST(HealthMessage, OneDevicePerCardWithOneVariant) {
  Config config;
  config.dra.cards = "fixed-online";
  const auto m = HealthMessage("node-a", {Card{0, "GPU-a", "m", 1, true}, Card{3, "GPU-d", "m", 1, false}},
                               PublishedVariants(config), 1700000000);
  ASSERT_EQ(m.devices_size(), 2);
  EXPECT_EQ(m.devices(0).device().device_name(), "gpu-0-fixed-online");
  EXPECT_EQ(m.devices(1).device().device_name(), "gpu-3-fixed-online");
  EXPECT_EQ(m.devices(1).health(), v1alpha1::UNHEALTHY);
}

}  // namespace
}  // namespace mgpu::dra
