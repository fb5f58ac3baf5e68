#include "node/gpu_backend.h"

#include <gtest/gtest.h>

#include "node/make_backend.h"
#include "node/nvml_backend.h"
#include "node/static_backend.h"

namespace mgpu::node {
namespace {

TEST(Xid, ApplicationCausedXidsAreNotCritical) {
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) EXPECT_FALSE(IsCriticalXid(xid)) << xid;
  for (uint64_t xid : {48, 62, 63, 64, 74, 79, 92, 94, 95}) EXPECT_TRUE(IsCriticalXid(xid)) << xid;
}

TEST(StaticBackend, ReadsCardsWithTheInventoryFieldNames) {
  auto cards = StaticBackend::ParseCards(R"(
- {index: 0, uuid: GPU-a, model: NVIDIA A10, memoryMiB: 24576, healthy: true}
- {index: 1, uuid: GPU-b, model: NVIDIA A10, memoryMiB: 24576, healthy: false}
)",
                                         "cards.yaml");
  ASSERT_TRUE(cards.ok()) << cards.message();
  ASSERT_EQ(cards->size(), 2u);
  EXPECT_EQ((*cards)[1], (Card{1, "GPU-b", "NVIDIA A10", 24576, false}));
  auto mapping =
      StaticBackend::ParseCards("cards: [{index: 0, uuid: u, model: m, memoryMiB: 1, healthy: true}]", "x");
  EXPECT_TRUE(mapping.ok()) << mapping.message();
}

TEST(StaticBackend, RejectsBadFilesNamingTheField) {
  auto missing =
      StaticBackend::ParseCards("- {index: 0, model: A10, memoryMiB: 1, healthy: true}", "cards.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "cards.yaml: cards[0].uuid is missing");
  EXPECT_FALSE(StaticBackend::ParseCards("[]", "cards.yaml").ok());
  EXPECT_FALSE(StaticBackend::ParseCards("just text", "cards.yaml").ok());
  auto file = StaticBackend::Load("/nonexistent/cards.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.message().find("/nonexistent/cards.yaml"), std::string::npos);
}

TEST(StaticBackend, DeliversInjectedHealthChanges) {
  StaticBackend backend({Card{0, "GPU-a", "A10", 1024, true}});
  auto none = backend.WaitHealthEvent(std::chrono::milliseconds(0));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  backend.SetHealthy("GPU-a", false, "XID 79");
  auto event = backend.WaitHealthEvent(std::chrono::seconds(5));
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ((*event)->card_uuid, "GPU-a");
  EXPECT_FALSE((*event)->healthy);
  auto cards = backend.Discover();
  ASSERT_TRUE(cards.ok());
  EXPECT_FALSE(cards->front().card.healthy);
}

TEST(NvmlBackend, MissingLibraryIsAClearError) {
  auto b = NvmlBackend::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos) << b.message();
  EXPECT_NE(b.message().find("gpuBackend: static"), std::string::npos) << b.message();
}

TEST(MakeBackend, StaticNeedsAReadableFile) {
  DevicePluginConfig config;
  config.gpu_backend = "static";
  config.static_inventory_file = "/nonexistent/cards.yaml";
  EXPECT_FALSE(MakeBackend(config).ok());
}

}  // namespace
}  // namespace mgpu::node
