#include "deviceplugin/device_list.h"

#include <gtest/gtest.h>

namespace mgpu::dp {
namespace {

std::vector<Card> EightA100s() {
  std::vector<Card> cards;
  for (int i = 0; i < 8; ++i)
    cards.push_back(
        Card{i, "GPU-" + std::string(8, 'a' + i) + "-1111-2222-3333-444455556666", "A100-80GB", 81920, true});
  return cards;
}

TEST(DeviceList, ListsEveryDeviceWithItsCardsHealth) {
  Config config;
  config.memory_unit_mib = 1024;
  std::vector<Card> cards = {{0, "GPU-a", "A10", 4096, true}, {1, "GPU-b", "A10", 4096, false}};
  auto list = BuildDeviceList(cards, Resource::kMemory, config);
  ASSERT_EQ(list.devices_size(), 8);
  EXPECT_EQ(list.devices(0).id(), "GPU-a-m0");
  EXPECT_EQ(list.devices(0).health(), "Healthy");
  EXPECT_EQ(list.devices(7).id(), "GPU-b-m3");
  EXPECT_EQ(list.devices(7).health(), "Unhealthy");
  EXPECT_EQ(BuildDeviceList(cards, Resource::kCore, config).devices_size(), 200);
}

TEST(DeviceList, WorstCaseSizeIsTheSerializedSizeWithEveryCardUnhealthy) {
  Config config;
  config.memory_unit_mib = 16;
  auto cards = EightA100s();
  for (Card& c : cards) c.healthy = false;
  for (Resource r : kAllResources) {
    auto list = BuildDeviceList(cards, r, config);
    EXPECT_EQ(WorstCaseListBytes(cards, r, config), list.SerializeAsString().size());
  }
}

TEST(DeviceList, OneMiBUnitOnEightA100sIsRefusedWithTheUnitThatFits) {
  Config config;  // memoryUnitMiB 1: 655,360 devices
  const auto cards = EightA100s();
  Status s = CheckListAndWatchSize(cards, config);
  ASSERT_FALSE(s.ok());
  const std::string key = "set memoryUnitMiB to ";
  const size_t at = s.message().find(key);
  ASSERT_NE(at, std::string::npos) << s.message();
  const int64_t unit = std::stoll(s.message().substr(at + key.size()));
  EXPECT_NE(s.message().find("655360 devices"), std::string::npos) << s.message();

  config.memory_unit_mib = unit;
  EXPECT_TRUE(CheckListAndWatchSize(cards, config).ok());
  auto healthy = BuildDeviceList(cards, Resource::kMemory, config);
  EXPECT_LT(healthy.SerializeAsString().size(), kMaxListAndWatchBytes);
  auto sick = cards;
  for (Card& c : sick) c.healthy = false;
  EXPECT_LE(BuildDeviceList(sick, Resource::kMemory, config).SerializeAsString().size(),
            kMaxListAndWatchBytes);

  config.memory_unit_mib = unit - 1;  // the suggestion is the smallest that fits
  EXPECT_FALSE(CheckListAndWatchSize(cards, config).ok());
  EXPECT_EQ(SmallestMemoryUnit(cards, config), unit);
  config.memory_unit_mib = unit + 5;  // one that fits already is its own answer
  EXPECT_EQ(SmallestMemoryUnit(cards, config), unit + 5);
}

}  // namespace
}  // namespace mgpu::dp
