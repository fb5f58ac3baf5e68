#include "node/node_metadata.h"

#include <gtest/gtest.h>

#include "common/codec.h"

namespace mgpu::node {
namespace {

TEST(LabelValue, KeepsWhatALabelValueMayHold) {
  EXPECT_EQ(LabelValue("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(LabelValue("Tesla_T4.v2"), "Tesla_T4.v2");
  EXPECT_EQ(LabelValue(" (weird) "), "weird");
  EXPECT_EQ(LabelValue("--"), "");
  EXPECT_EQ(LabelValue(""), "");
  const std::string long_value = LabelValue(std::string(62, 'a') + "-b");
  EXPECT_EQ(long_value, std::string(62, 'a'));
}

TEST(NodeMetadata, InventoryAnnotationAndLabels) {
  Config config;
  config.memory_unit_mib = 16;
  config.isolation.backend = IsolationBackend::kHamiCore;
  const std::vector<Card> cards = {{1, "GPU-b", "NVIDIA H100 80GB HBM3", 81559, false},
                                   {0, "GPU-a", "NVIDIA H100 80GB HBM3", 81559, true}};
  const kube::MetadataPatch patch = NodeMetadata(cards, config, "0.1.0", 1700000000);
  const ResourceNames names = config.Names();
  auto inventory = DecodeInventory(*patch.annotations.at(names.gpu_inventory));
  ASSERT_TRUE(inventory.ok()) << inventory.message();
  ASSERT_EQ(inventory->cards.size(), 2u);
  EXPECT_EQ(inventory->cards[0].uuid, "GPU-a");
  EXPECT_FALSE(inventory->cards[1].healthy);
  EXPECT_EQ(inventory->memory_unit_mib, 16);
  EXPECT_EQ(inventory->isolation, IsolationBackend::kHamiCore);
  EXPECT_EQ(inventory->version, "0.1.0");
  EXPECT_EQ(inventory->heartbeat, 1700000000);
  EXPECT_EQ(patch.labels.at(names.label_product), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(patch.labels.at(names.label_count), "2");
  EXPECT_EQ(patch.labels.at(names.label_memory), "81559");

  EXPECT_FALSE(inventory->stopping);
  const kube::MetadataPatch stopping = NodeMetadata(cards, config, "0.1.0", 1700000001, true);
  auto said = DecodeInventory(*stopping.annotations.at(names.gpu_inventory));
  ASSERT_TRUE(said.ok()) << said.message();
  EXPECT_TRUE(said->stopping);
  EXPECT_EQ(said->cards, inventory->cards);

  const kube::MetadataPatch none = NodeMetadata({}, config, "0.1.0", 1);
  EXPECT_EQ(none.labels.at(names.label_count), "0");
  EXPECT_EQ(none.labels.at(names.label_product), std::nullopt);
}

}  // namespace
}  // namespace mgpu::node
