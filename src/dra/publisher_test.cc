// The slice publisher against the fake API server (tests/support): what it publishes, and that it publishes
// again, at a higher pool generation, after a deletion, a health change and a restart. The real
// kube-apiserver accepting these slices and the real kubelet deleting them are tests/dra/'s part.
#include "dra/publisher.h"

#include <gtest/gtest.h>

#include "common/codec.h"
#include "common/dra.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using mgpu::testing::WaitUntil;
using nlohmann::json;

class PublisherTest : public ::testing::Test {
 protected:
  PublisherTest()
      : state_({Card{0, "GPU-a", "NVIDIA A10", 24576, true}, Card{1, "GPU-b", "NVIDIA A10", 24576, true}}) {
    config_.dra.cards = "any";  // the opt-in six-device layout: a counters slice and a devices slice
    EXPECT_TRUE(api_.Start().ok());
    json node = {
        {"metadata", {{"name", "node-a"}, {"annotations", {{config_.Names().gpu_inventory, "{}"}}}}}};
    EXPECT_TRUE(api_.Create("nodes", node).ok());
    client_ = kube::Client::Create({.server = api_.url()}).value();
    for (const Card& c : state_.Cards()) cards_.push_back(NodeCard{c, 24576, "", {}});
  }

  std::unique_ptr<SlicePublisher> Start() {
    auto p = std::make_unique<SlicePublisher>(config_, "node-a", cards_, *client_, state_, "test");
    p->Start();
    return p;
  }

  std::vector<json> Slices() { return api_.List("resourceslices"); }
  int64_t GenerationStored() {
    auto all = Slices();
    return all.empty() ? 0 : all[0]["spec"]["pool"]["generation"].get<int64_t>();
  }
  bool AllAt(int64_t generation, size_t count = 2) {
    auto all = Slices();
    if (all.size() != count) return false;
    for (const json& s : all) {
      if (s["spec"]["pool"]["generation"] != generation) return false;
    }
    return true;
  }

  testing::FakeApiServer api_;
  Config config_;
  dp::DeviceState state_;
  std::vector<NodeCard> cards_;
  std::unique_ptr<kube::Client> client_;
};

TEST_F(PublisherTest, PublishesThePoolAndLabelsTheNode) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return p->UpToDate() && AllAt(1); }));
  auto devices = api_.Get("resourceslices", "", "node-a-mgpu.io-devices-0");
  ASSERT_TRUE(devices.has_value());
  EXPECT_EQ((*devices)["spec"]["devices"].size(), 12u);
  EXPECT_TRUE(api_.Get("resourceslices", "", "node-a-mgpu.io-counters-0").has_value());
  ASSERT_TRUE(WaitUntil([&] {
    auto node = api_.Get("nodes", "", "node-a");
    return node &&
           (*node)["metadata"].value("labels", json::object()).value(config_.Names().label_count, "") == "2";
  }));
  auto node = *api_.Get("nodes", "", "node-a");
  // A DRA node carries no device-plugin inventory: the extender places no device-plugin pod there.
  EXPECT_FALSE(node["metadata"].value("annotations", json::object()).contains(config_.Names().gpu_inventory));
  // Its cards are D/gpu-dra-inventory: the extender scores DRA pods with them.
  const std::string dra_inventory =
      node["metadata"].value("annotations", json::object()).value(config_.Names().gpu_dra_inventory, "");
  Result<NodeInventory> inventory = DecodeInventory(dra_inventory);
  ASSERT_TRUE(inventory.ok()) << dra_inventory;
  EXPECT_FALSE(inventory->cards.empty());
  EXPECT_EQ(p->publications(), 1u);
}

TEST_F(PublisherTest, ASliceTheKubeletDeletesComesBackAtAHigherGeneration) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(1); }));
  ASSERT_TRUE(api_.Delete("resourceslices", "", "node-a-mgpu.io-devices-0").ok());
  ASSERT_TRUE(WaitUntil([&] { return AllAt(2); }));
  // Someone else's edit of a slice is undone too.
  auto counters = *api_.Get("resourceslices", "", "node-a-mgpu.io-counters-0");
  counters["spec"]["sharedCounters"][0]["counters"]["sharing"]["value"] = "2";
  auto updated = api_.Update("resourceslices", counters);
  ASSERT_TRUE(updated.ok()) << updated.message();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(3); }));
  EXPECT_EQ(
      (*api_.Get("resourceslices", "",
                 "node-a-mgpu.io-counters-0"))["spec"]["sharedCounters"][0]["counters"]["sharing"]["value"],
      "1");
}

TEST_F(PublisherTest, AHealthChangeTaintsTheCardsDevicesInANewGeneration) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(1); }));
  state_.SetHealthy("GPU-b", false);
  ASSERT_TRUE(WaitUntil([&] { return AllAt(2); }));
  const json devices = (*api_.Get("resourceslices", "", "node-a-mgpu.io-devices-0"))["spec"]["devices"];
  for (const json& d : devices)
    EXPECT_EQ(d.contains("taints"), d["name"].get<std::string>().starts_with("gpu-1-")) << d["name"];
}

TEST_F(PublisherTest, ARestartPublishesAboveEveryGenerationAndDropsStaleSlices) {
  json stale = {{"metadata", {{"name", "node-a-mgpu.io-devices-9"}}},
                {"spec",
                 {{"driver", "mgpu.io"},
                  {"nodeName", "node-a"},
                  {"pool", {{"name", "node-a"}, {"generation", 41}, {"resourceSliceCount", 1}}},
                  {"devices", json::array()}}}};
  json other_node = stale;
  other_node["metadata"]["name"] = "node-b-mgpu.io-devices-0";
  other_node["spec"]["nodeName"] = "node-b";
  ASSERT_TRUE(api_.Create("resourceslices", stale).ok());
  ASSERT_TRUE(api_.Create("resourceslices", other_node).ok());
  {
    auto p = Start();
    ASSERT_TRUE(WaitUntil([&] { return p->UpToDate() && p->generation() > 41; }));
  }
  // What the first life left stored: it may have published once more than it had to (its informer can see
  // its own write before the write's answer names the version), so the restart is measured against this.
  int64_t left = 0;
  for (const json& s : Slices())
    if (s["spec"]["nodeName"] == "node-a")
      left = std::max(left, s["spec"]["pool"]["generation"].get<int64_t>());
  ASSERT_GT(left, 41);
  auto again = Start();
  ASSERT_TRUE(WaitUntil([&] { return again->UpToDate() && again->generation() > left; }));
  EXPECT_FALSE(api_.Get("resourceslices", "", "node-a-mgpu.io-devices-9").has_value());
  EXPECT_TRUE(api_.Get("resourceslices", "", "node-b-mgpu.io-devices-0").has_value());  // not ours
  EXPECT_EQ(Slices().size(), 3u);
}

}  // namespace
}  // namespace mgpu::dra
