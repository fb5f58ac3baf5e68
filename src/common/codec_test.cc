#include "common/codec.h"

#include <gtest/gtest.h>

namespace mgpu {
namespace {

NodeInventory SampleInventory() {
  NodeInventory inv;
  inv.cards = {Card{0, "GPU-aaaa", "NVIDIA A10", 24576, true},
               Card{1, "GPU-bbbb", "NVIDIA A10", 24576, false}};
  inv.memory_unit_mib = 16;
  inv.isolation = IsolationBackend::kHamiCore;
  inv.version = "0.1.0";
  inv.heartbeat = 1763900000;
  return inv;
}

Assignment SampleAssignment() {
  return Assignment{{{"server", {{"GPU-aaaa", 30, 0, 4096}}},
                     {"worker", {{"GPU-aaaa", 50, 0, 8192}, {"GPU-bbbb", 50, 0, 8192}}},
                     {"batch", {{"GPU-bbbb", 0, 30, 2048}}}}};
}

TEST(Codec, InventoryRoundTrips) {
  const NodeInventory inv = SampleInventory();
  auto back = DecodeInventory(EncodeInventory(inv));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(*back, inv);
  auto empty = DecodeInventory(EncodeInventory(NodeInventory{}));
  ASSERT_TRUE(empty.ok()) << empty.message();
  EXPECT_EQ(*empty, NodeInventory{});
}

TEST(Codec, InventoryWireFormatUsesTheDocumentedKeys) {
  EXPECT_EQ(
      EncodeInventory(SampleInventory()),
      R"({"cards":[{"healthy":true,"index":0,"memoryMiB":24576,"model":"NVIDIA A10","uuid":"GPU-aaaa"},)"
      R"({"healthy":false,"index":1,"memoryMiB":24576,"model":"NVIDIA A10","uuid":"GPU-bbbb"}],)"
      R"("heartbeat":1763900000,"isolation":"hami-core","memoryUnitMiB":16,"version":"0.1.0"})");
}

// A stopping plugin's inventory says so; an inventory without the key (every earlier plugin's) is not
// stopping.
TEST(Codec, InventoryStoppingRoundTripsAndDefaultsToFalse) {
  NodeInventory inv = SampleInventory();
  inv.stopping = true;
  const std::string text = EncodeInventory(inv);
  EXPECT_NE(text.find(R"("stopping":true)"), std::string::npos) << text;
  auto back = DecodeInventory(text);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_TRUE(back->stopping);
  EXPECT_EQ(*back, inv);
  auto running = DecodeInventory(EncodeInventory(SampleInventory()));
  ASSERT_TRUE(running.ok()) << running.message();
  EXPECT_FALSE(running->stopping);
  EXPECT_EQ(DecodeInventory(R"({"cards":[],"memoryUnitMiB":1,"isolation":"none","version":"","heartbeat":0,)"
                            R"("stopping":"yes"})")
                .message(),
            "gpu-inventory: stopping must be true or false");
}

TEST(Codec, InventoryRejectsBadFieldsByPath) {
  EXPECT_EQ(DecodeInventory("{").message(), "gpu-inventory is not valid JSON");
  EXPECT_EQ(DecodeInventory("[]").message(), "gpu-inventory: the value must be an object");
  EXPECT_EQ(DecodeInventory(R"({"memoryUnitMiB":1,"isolation":"none","version":"","heartbeat":0})").message(),
            "gpu-inventory: cards is missing");
  EXPECT_EQ(
      DecodeInventory(R"({"cards":[{"index":0,"uuid":"G","model":"m","memoryMiB":"lots","healthy":true}],)"
                      R"("memoryUnitMiB":1,"isolation":"none","version":"","heartbeat":0})")
          .message(),
      "gpu-inventory: cards[0].memoryMiB must be a whole number");
  EXPECT_EQ(DecodeInventory(R"({"cards":[{"index":0,"uuid":"G","model":"m","memoryMiB":1,"healthy":true},)"
                            R"({"index":1,"uuid":"G","model":"m","memoryMiB":1,"healthy":true}],)"
                            R"("memoryUnitMiB":1,"isolation":"none","version":"","heartbeat":0})")
                .message(),
            "gpu-inventory: cards[1].uuid repeats G");
  EXPECT_EQ(DecodeInventory(R"({"cards":[],"memoryUnitMiB":0,"isolation":"none","version":"","heartbeat":0})")
                .message(),
            "gpu-inventory: memoryUnitMiB must be at least 1");
  EXPECT_EQ(DecodeInventory(R"({"cards":[],"memoryUnitMiB":1,"isolation":"kata","version":"","heartbeat":0})")
                .message(),
            "gpu-inventory: isolation \"kata\" is not one of none, hami-core, mps");
}

TEST(Codec, AssignmentRoundTripsForBothPodAnnotations) {
  // D/gpu-assignment and D/gpu-allocated share the format.
  const Assignment a = SampleAssignment();
  auto back = DecodeAssignment(EncodeAssignment(a));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(*back, a);
  EXPECT_EQ(
      EncodeAssignment(Assignment{{{"c", {{"GPU-1", 30, 0, 4096}}}}}),
      R"({"containers":[{"cards":[{"core":30,"memoryMiB":4096,"reclaimedCore":0,"uuid":"GPU-1"}],"name":"c"}]})");
}

TEST(Codec, AssignmentRejectsBadFieldsByPath) {
  EXPECT_EQ(DecodeAssignment("not json").message(), "gpu assignment is not valid JSON");
  EXPECT_EQ(DecodeAssignment(std::string(100000, '[')).message(),
            "gpu assignment nests deeper than 256 levels");
  // Found by fuzz_assignment: a share beyond int was narrowed before the check (2^32 + 50 read as 50).
  EXPECT_EQ(DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":"G","core":4294967346,)"
                             R"("reclaimedCore":0,"memoryMiB":1}]}]})")
                .message(),
            "gpu assignment: containers[0].cards[0].core must be at most 100");
  EXPECT_EQ(DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":"G","core":1,)"
                             R"("reclaimedCore":0,"memoryMiB":18446744073709551615}]}]})")
                .message(),
            "gpu assignment: containers[0].cards[0].memoryMiB must be a whole number");
  EXPECT_EQ(DecodeAssignment(R"({"containers":{}})").message(), "gpu assignment: containers must be a list");
  EXPECT_EQ(DecodeAssignment(R"({"containers":[{"name":"c","cards":[]}]})").message(),
            "gpu assignment: containers[0].cards must not be empty");
  EXPECT_EQ(DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":"G","core":-1,"reclaimedCore":0,)"
                             R"("memoryMiB":1}]}]})")
                .message(),
            "gpu assignment: containers[0].cards[0].core must be at least 0");
  EXPECT_EQ(
      DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":"G","core":101,"reclaimedCore":0,)"
                       R"("memoryMiB":1}]}]})")
          .message(),
      "gpu assignment: containers[0].cards[0].core must be at most 100");
  EXPECT_EQ(DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":7,"core":1,"reclaimedCore":0,)"
                             R"("memoryMiB":1}]}]})")
                .message(),
            "gpu assignment: containers[0].cards[0].uuid must be a string");
  EXPECT_EQ(
      DecodeAssignment(R"({"containers":[{"name":"c","cards":[{"uuid":"G","core":1,"reclaimedCore":0,)"
                       R"("memoryMiB":1}]},{"name":"c","cards":[{"uuid":"G","core":1,"reclaimedCore":0,)"
                       R"("memoryMiB":1}]}]})")
          .message(),
      "gpu assignment: containers[1].name repeats c");
}

TEST(Codec, OversizedAnnotationsAreOneShortSentence) {
  const std::string huge = "{\"cards\":[],\"pad\":\"" + std::string(kMaxAnnotationBytes, 'x') + "\"}";
  EXPECT_EQ(DecodeInventory(huge).message(), "gpu-inventory is " + std::to_string(huge.size()) +
                                                 " bytes, over the 262144 an annotation may hold");
  EXPECT_EQ(DecodeAssignment(huge).message(), "gpu assignment is " + std::to_string(huge.size()) +
                                                  " bytes, over the 262144 an annotation may hold");
  EXPECT_EQ(DecodeAssumeTime(std::string(100000, '1')).message(),
            "gpu-assume-time is 100000 characters long, not unix nanoseconds");
}

TEST(Codec, AssumeTimeRoundTrips) {
  EXPECT_EQ(*DecodeAssumeTime(EncodeAssumeTime(1763900000123456789)), 1763900000123456789);
  EXPECT_EQ(DecodeAssumeTime("12x").message(), "gpu-assume-time \"12x\" is not unix nanoseconds");
  EXPECT_FALSE(DecodeAssumeTime("").ok());
  EXPECT_FALSE(DecodeAssumeTime("-5").ok());
}

}  // namespace
}  // namespace mgpu
