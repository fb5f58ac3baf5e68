#include "dra/devices.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

TEST(NodeCards, CapacityFollowsTheAllocatorsRuleAndCardsComeByIndex) {
  Config config;
  config.memory_unit_mib = 16;
  config.reserved_memory_mib = 100;
  const std::vector<node::GpuInfo> gpus = {
      {Card{1, "GPU-b", "NVIDIA A10", 24576, true}, -1, ""},
      {Card{0, "GPU-a", "NVIDIA A10", 24576, false}, -1, "0000:3b:00.0"}};
  const auto cards = NodeCardsOf(gpus, config);
  ASSERT_EQ(cards.size(), 2u);
  EXPECT_EQ(cards[0].card.uuid, "GPU-a");
  EXPECT_FALSE(cards[0].card.healthy);
  EXPECT_EQ(cards[0].pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(cards[0].capacity_mib, (24576 - 100) / 16 * 16);
  EXPECT_TRUE(cards[0].device_nodes.empty());  // no minor: no device nodes (static backend)
  EXPECT_EQ(FindCard(cards, 1)->card.uuid, "GPU-b");
  EXPECT_EQ(FindCard(cards, 7), nullptr);
}

TEST(NodeCards, DeviceNodesAreTheCardsAndControlNodesThatExist) {
  testing::TempDir dev;
  for (const char* name : {"nvidia3", "nvidiactl", "nvidia-uvm"}) dev.Write(name, "");
  const auto cards =
      NodeCardsOf({{Card{0, "GPU-a", "m", 1024, true}, 3, ""}, {Card{1, "GPU-b", "m", 1024, true}, 4, ""}},
                  Config(), dev.path());
  EXPECT_EQ(cards[0].device_nodes,
            (std::vector<std::string>{"/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"}));
  // nvidia4 is not there: only the control nodes that are.
  EXPECT_EQ(cards[1].device_nodes, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm"}));
}

}  // namespace
}  // namespace mgpu::dra
