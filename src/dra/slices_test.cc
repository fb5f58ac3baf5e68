#include "dra/slices.h"

#include <gtest/gtest.h>

#include "common/dra.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

std::vector<NodeCard> Cards(int n, int64_t capacity_mib = 24576) {
  std::vector<NodeCard> out;
  for (int i = 0; i < n; ++i)
    out.push_back(
        NodeCard{Card{i, "GPU-" + std::to_string(i), "NVIDIA A10", 24576, true}, capacity_mib, "", {}});
  return out;
}

const json* Device(const std::vector<json>& slices, const std::string& name) {
  for (const json& s : slices) {
    if (!s["spec"].contains("devices")) continue;
    for (const json& d : s["spec"]["devices"]) {
      if (d["name"] == name) return &d;
    }
  }
  return nullptr;
}

// The opt-in six-device layout (dra.cards: any).
Config Any() {
  Config config;
  config.dra.cards = "any";
  return config;
}

TEST(Slices, PoolOfCounterAndDeviceSlicesPerEightCards) {
  const auto slices = BuildSlices("node-a", Cards(10), Any(), 7);
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0]["metadata"]["name"], "node-a-mgpu.io-counters-0");
  EXPECT_EQ(slices[1]["metadata"]["name"], "node-a-mgpu.io-devices-0");
  EXPECT_EQ(slices[3]["metadata"]["name"], "node-a-mgpu.io-devices-1");
  for (const json& s : slices) {
    EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
    EXPECT_EQ(s["spec"]["driver"], "mgpu.io");
    EXPECT_EQ(s["spec"]["nodeName"], "node-a");
    EXPECT_EQ(s["spec"]["pool"], json({{"name", "node-a"}, {"generation", 7}, {"resourceSliceCount", 4}}));
    // A slice holds counters or devices, never both; at most 8 counter sets and 64 devices (v1.36 limits).
    EXPECT_NE(s["spec"].contains("sharedCounters"), s["spec"].contains("devices"));
    EXPECT_LE(s["spec"].value("sharedCounters", json::array()).size(), kCardsPerSlice);
    EXPECT_LE(s["spec"].value("devices", json::array()).size(), 64u);
  }
  EXPECT_EQ(slices[0]["spec"]["sharedCounters"].size(), 8u);
  EXPECT_EQ(slices[2]["spec"]["sharedCounters"].size(), 2u);
  EXPECT_EQ(slices[1]["spec"]["devices"].size(), 48u);
  EXPECT_EQ(slices[3]["spec"]["devices"].size(), 12u);
  EXPECT_EQ(slices[2]["spec"]["sharedCounters"][1],
            json({{"name", "gpu-9"}, {"counters", {{"sharing", {{"value", "1"}}}}}}));
}

TEST(Slices, SixDevicesPerCardConsumingItsOneSharingCounter) {
  Config config = Any();
  config.memory_unit_mib = 4;
  const auto slices = BuildSlices("n", Cards(1, 81556), config, 1);
  const json& devices = slices[1]["spec"]["devices"];
  ASSERT_EQ(devices.size(), 6u);
  std::vector<std::string> names;
  for (const json& d : devices) {
    names.push_back(d["name"]);
    EXPECT_EQ(d["consumesCounters"],
              json::array({{{"counterSet", "gpu-0"}, {"counters", {{"sharing", {{"value", "1"}}}}}}}));
    EXPECT_EQ(d["attributes"]["uuid"], json({{"string", "GPU-0"}}));
    EXPECT_EQ(d["attributes"]["index"], json({{"int", 0}}));
    EXPECT_EQ(d["attributes"]["product"], json({{"string", "NVIDIA-A10"}}));
    EXPECT_FALSE(d.contains("taints"));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"gpu-0-fixed", "gpu-0-guaranteed", "gpu-0-native", "gpu-0-fixed-online",
                                      "gpu-0-guaranteed-online", "gpu-0-whole"}));
  const json& fixed = devices[0];
  EXPECT_EQ(fixed["allowMultipleAllocations"], true);
  EXPECT_EQ(fixed["attributes"]["computePolicy"], json({{"string", "fixed-share"}}));
  EXPECT_EQ(fixed["attributes"]["offlineShares"], json({{"bool", true}}));
  EXPECT_EQ(
      fixed["capacity"]["cores"],
      json::parse(
          R"({"value": "100", "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}})"));
  EXPECT_EQ(fixed["capacity"]["reclaimedCores"], fixed["capacity"]["cores"]);
  // Memory: the whole by default, in steps of the unit, never zero, never a step of "0".
  EXPECT_EQ(
      fixed["capacity"]["memory"],
      json::parse(
          R"({"value": "81556Mi", "requestPolicy": {"default": "81556Mi", "validRange": {"min": "4Mi", "max": "81556Mi", "step": "4Mi"}}})"));
  const json& native = devices[2];
  EXPECT_FALSE(native["capacity"].contains("reclaimedCores"));
  EXPECT_EQ(native["attributes"]["offlineShares"], json({{"bool", false}}));
  EXPECT_FALSE(devices[3]["capacity"].contains("reclaimedCores"));
  const json& whole = devices[5];
  EXPECT_FALSE(whole.contains("allowMultipleAllocations"));
  EXPECT_FALSE(whole["attributes"].contains("computePolicy"));
  EXPECT_EQ(whole["attributes"]["wholeCard"], json({{"bool", true}}));
  EXPECT_FALSE(whole["capacity"]["memory"].contains("requestPolicy"));
}

// dra.cards names one variant: one device per card, no counters (nothing for the scheduler to add up across
// the node's devices), and a claim of the whole class may take it (naming no memory, it consumes all of it).
TEST(Slices, OneVariantPublishesOneDevicePerCardWithoutCounters) {
  Config config;
  config.dra.cards = "fixed";
  const auto slices = BuildSlices("n", Cards(10, 24576), config, 3);
  ASSERT_EQ(slices.size(), 2u);  // two groups of at most 8 cards, devices only
  EXPECT_EQ(slices[0]["metadata"]["name"], "n-mgpu.io-devices-0");
  EXPECT_EQ(slices[1]["metadata"]["name"], "n-mgpu.io-devices-1");
  int devices = 0;
  for (const json& s : slices) {
    EXPECT_FALSE(s["spec"].contains("sharedCounters"));
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    for (const json& d : s["spec"]["devices"]) {
      EXPECT_EQ(d["name"], "gpu-" + std::to_string(devices++) + "-fixed");
      EXPECT_FALSE(d.contains("consumesCounters"));
      EXPECT_EQ(d["allowMultipleAllocations"], true);
      EXPECT_EQ(d["attributes"]["wholeCard"], json({{"bool", true}}));
      EXPECT_EQ(d["attributes"]["offlineShares"], json({{"bool", true}}));
      EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["default"], "24Gi");
    }
  }
  EXPECT_EQ(devices, 10);
  config.dra.cards = "fixed-online";
  const auto online_slices = BuildSlices("n", Cards(1), config, 1);
  const json& online = online_slices[0]["spec"]["devices"][0];
  EXPECT_EQ(online["name"], "gpu-0-fixed-online");
  EXPECT_FALSE(online["capacity"].contains("reclaimedCores"));
}

TEST(Slices, AnUnhealthyCardsDevicesAreTaintedAndTheSpecChanges) {
  auto cards = Cards(2);
  const auto healthy = BuildSlices("n", cards, Any(), 1);
  cards[1].card.healthy = false;
  const auto sick = BuildSlices("n", cards, Any(), 1);
  for (Variant v : kVariants) {
    EXPECT_FALSE(Device(sick, DeviceName(0, v))->contains("taints"));
    EXPECT_EQ((*Device(sick, DeviceName(1, v)))["taints"],
              json::array({{{"key", "mgpu.io/unhealthy"}, {"effect", "NoSchedule"}}}));
  }
  EXPECT_TRUE(SameSpec(sick[0], healthy[0]));  // the counters did not change
  EXPECT_FALSE(SameSpec(sick[1], healthy[1]));
}

TEST(Slices, SameSpecIgnoresGenerationAndTheTaintTimeTheServerAdds) {
  auto cards = Cards(1);
  cards[0].card.healthy = false;
  const auto wanted = BuildSlices("n", cards, Any(), 1);
  json stored = BuildSlices("n", cards, Any(), 9)[1];
  stored["metadata"]["resourceVersion"] = "42";
  stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-26T02:33:54Z";
  EXPECT_TRUE(SameSpec(stored, wanted[1]));
  stored["spec"]["devices"][0]["attributes"]["model"] = json({{"string", "other"}});
  EXPECT_FALSE(SameSpec(stored, wanted[1]));
  EXPECT_FALSE(SameSpec(json::object(), wanted[1]));
}

TEST(Slices, ANodeWithoutCardsPublishesAnEmptyPool) {
  const auto slices = BuildSlices("n", {}, Config(), 3);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_FALSE(slices[0]["spec"].contains("devices"));
}

}  // namespace
}  // namespace mgpu::dra
