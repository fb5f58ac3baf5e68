#include "common/dra.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/allocator.h"
#include "common/request.h"
#include "common/test_objects.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

PodRequest Pod(Qos qos, ComputePolicy policy, bool dedicated = false) {
  PodRequest p;
  p.namespace_name = "default";
  p.name = "p";
  p.qos = qos;
  p.compute_policy = policy;
  p.dedicated = dedicated;
  return p;
}

ContainerRequest Container(int core, int reclaimed, int64_t memory_mib, int cards = 1) {
  ContainerRequest c;
  c.name = "c";
  c.core = core;
  c.reclaimed_core = reclaimed;
  c.memory_mib = memory_mib;
  c.card_count = cards;
  return c;
}

TEST(DraNames, DeviceNamesRoundTripAndRejectOthers) {
  for (int index : {0, 7, 15}) {
    for (Variant v : kVariants) {
      auto back = ParseDeviceName(DeviceName(index, v));
      ASSERT_TRUE(back.has_value()) << DeviceName(index, v);
      EXPECT_EQ(*back, (DeviceRef{index, v}));
    }
  }
  EXPECT_EQ(DeviceName(3, Variant::kGuaranteedOnline), "gpu-3-guaranteed-online");
  for (const char* bad :
       {"gpu-", "gpu-1", "gpu-x-fixed", "gpu-01-fixed", "gpu--1-fixed", "gpu-1-mixed", "card-1-fixed"})
    EXPECT_FALSE(ParseDeviceName(bad).has_value()) << bad;
}

TEST(DraNames, VariantsKeepThePerCardRules) {
  int offline = 0, shareable = 0;
  for (Variant v : kVariants) {
    offline += OfflineShares(v);
    shareable += Shareable(v);
    // Offline shares never go to a native-burst-share card (DESIGN §4).
    if (OfflineShares(v)) {
      EXPECT_NE(PolicyOf(v), ComputePolicy::kNativeBurstShare);
    }
  }
  EXPECT_EQ(offline, 2);
  EXPECT_EQ(shareable, 5);
  EXPECT_FALSE(PolicyOf(Variant::kWhole).has_value());
}

TEST(DraNames, PublishedVariantsFollowDraCards) {
  Config c;
  EXPECT_EQ(PublishedVariants(c), std::vector<Variant>{Variant::kFixed});  // the default: one kind, fixed
  EXPECT_FALSE(SharedCounters(c));
  c.dra.cards = "any";
  EXPECT_EQ(PublishedVariants(c).size(), 6u);
  EXPECT_TRUE(SharedCounters(c));
  EXPECT_TRUE(WholeCardDevice(Variant::kWhole, c));
  EXPECT_FALSE(WholeCardDevice(Variant::kFixed, c));
  c.dra.cards = "guaranteed-online";
  EXPECT_EQ(PublishedVariants(c), std::vector<Variant>{Variant::kGuaranteedOnline});
  EXPECT_FALSE(SharedCounters(c));
  EXPECT_TRUE(WholeCardDevice(Variant::kGuaranteedOnline, c));
  EXPECT_EQ(ParseVariant("native"), Variant::kNative);
  EXPECT_FALSE(ParseVariant("any").has_value());
}

TEST(DraNames, ClassesAndTheirPolicies) {
  Config c;
  EXPECT_EQ(ClassName(ComputePolicy::kGuaranteedBurstShare, c), "guaranteed-burst-share.mgpu.io");
  EXPECT_EQ(ClassPolicy("mgpu.io", c), ComputePolicy::kFixedShare);
  EXPECT_EQ(ClassPolicy("native-burst-share.mgpu.io", c), ComputePolicy::kNativeBurstShare);
  EXPECT_FALSE(ClassPolicy("whole.mgpu.io", c).has_value());
  EXPECT_TRUE(IsDriverClass("whole.mgpu.io", c));
  EXPECT_FALSE(IsDriverClass("gpu.nvidia.com", c));
  c.resource_domain = "vke.volcengine.com";
  EXPECT_EQ(WholeCardResource(c), "vke.volcengine.com/gpu");
}

TEST(DraNames, MemoryQuantitiesAreWhatTheApiServerWritesBack) {
  EXPECT_EQ(MemoryQuantity(24576), "24Gi");
  EXPECT_EQ(MemoryQuantity(81559), "81559Mi");
  EXPECT_EQ(MemoryQuantity(4), "4Mi");
  EXPECT_EQ(MemoryQuantity(1024 * 1024), "1Ti");
  EXPECT_EQ(MemoryQuantity(0), "0");
}

TEST(DraClaims, OnlineOfflineWholeAndMultiCardSpecs) {
  const Config c;
  json online = ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(30, 0, 4096), c);
  const json& r = online["devices"]["requests"][0];
  EXPECT_EQ(r["name"], "gpu");
  EXPECT_EQ(r["exactly"]["deviceClassName"], "fixed-share.mgpu.io");
  EXPECT_EQ(r["exactly"]["count"], 1);
  EXPECT_EQ(r["exactly"]["capacity"]["requests"], json({{"cores", "30"}, {"memory", "4Gi"}}));
  EXPECT_FALSE(online["devices"].contains("constraints"));

  json offline =
      ClaimSpecFor(Pod(Qos::kOffline, ComputePolicy::kGuaranteedBurstShare), Container(0, 40, 2048), c);
  EXPECT_EQ(offline["devices"]["requests"][0]["exactly"]["capacity"]["requests"],
            json({{"reclaimedCores", "40"}, {"memory", "2Gi"}}));
  EXPECT_EQ(offline["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "guaranteed-burst-share.mgpu.io");

  json multi = ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(100, 0, 32768, 2), c);
  EXPECT_EQ(multi["devices"]["requests"][0]["exactly"]["count"], 2);
  EXPECT_EQ(multi["devices"]["requests"][0]["exactly"]["capacity"]["requests"],
            json({{"cores", "50"}, {"memory", "16Gi"}}));
  EXPECT_EQ(multi["devices"]["constraints"][0]["distinctAttribute"], "mgpu.io/uuid");

  json whole =
      ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare, true), Container(200, 0, 2 * 81920, 2), c);
  EXPECT_EQ(whole["devices"]["requests"][0]["exactly"]["deviceClassName"], "whole.mgpu.io");
  EXPECT_FALSE(whole["devices"]["requests"][0]["exactly"].contains("capacity"));

  // Every spec the webhook makes passes the rules it checks claims against.
  for (const json& spec : {online, offline, multi, whole})
    EXPECT_TRUE(CheckClaimSpec(spec, c, "x").ok()) << spec;
  EXPECT_EQ(TemplateNameFor(Pod(Qos::kOffline, ComputePolicy::kFixedShare), Container(0, 40, 2048), c),
            "mgpu.io.fixed-share-offline-r40-m2048-x1");
  EXPECT_NE(
      TemplateNameFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(30, 0, 4096), c),
      TemplateNameFor(Pod(Qos::kOnline, ComputePolicy::kGuaranteedBurstShare), Container(30, 0, 4096), c));
}

json Spec(json exactly, json constraints = nullptr) {
  exactly["allocationMode"] = "ExactCount";
  json devices = {{"requests", json::array({{{"name", "gpu"}, {"exactly", exactly}}})}};
  if (!constraints.is_null()) devices["constraints"] = constraints;
  return {{"devices", devices}};
}

TEST(DraClaims, CheckClaimSpecRefusesWhatBreaksARule) {
  const Config c;
  const auto refusal = [&](const json& spec) {
    Status s = CheckClaimSpec(spec, c, "ResourceClaim default/x");
    return s.ok() ? std::string() : s.message();
  };
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"},
                          {"capacity",
                           {{"requests", {{"cores", "30"}, {"reclaimedCores", "30"}, {"memory", "1Gi"}}}}}}))
                .find("both cores and reclaimedCores"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"}, {"capacity", {{"requests", {{"memory", "1Gi"}}}}}}))
                .find("neither cores"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"},
                          {"capacity", {{"requests", {{"cores", "3"}, {"memory", "1Gi"}}}}}}))
                .find("between 5 and 100"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"}, {"capacity", {{"requests", {{"cores", "30"}}}}}}))
                .find("asks no memory"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "native-burst-share.mgpu.io"},
                          {"capacity", {{"requests", {{"reclaimedCores", "30"}, {"memory", "1Gi"}}}}}}))
                .find("only go to fixed-share"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"},
                          {"count", 2},
                          {"capacity", {{"requests", {{"cores", "30"}, {"memory", "1Gi"}}}}}}))
                .find("needs the selector"),
            std::string::npos);
  EXPECT_NE(refusal(Spec({{"deviceClassName", "mgpu.io"},
                          {"count", 2},
                          {"capacity", {{"requests", {{"reclaimedCores", "30"}, {"memory", "1Gi"}}}}}}))
                .find("offline shares take one card"),
            std::string::npos);
  json two = Spec(
      {{"deviceClassName", "mgpu.io"}, {"capacity", {{"requests", {{"cores", "30"}, {"memory", "1Gi"}}}}}});
  two["devices"]["requests"].push_back(two["devices"]["requests"][0]);
  EXPECT_NE(refusal(two).find("more than one request"), std::string::npos);
  // Other drivers' claims and whole cards pass.
  EXPECT_EQ(refusal(Spec({{"deviceClassName", "gpu.nvidia.com"}})), "");
  EXPECT_EQ(refusal(Spec({{"deviceClassName", "whole.mgpu.io"}, {"count", 4}})), "");
  // The refusal names the object.
  EXPECT_EQ(refusal(Spec({{"deviceClassName", "mgpu.io"}, {"capacity", {{"requests", {{"cores", "30"}}}}}}))
                .rfind("ResourceClaim default/x request gpu", 0),
            0u);
}

AllocatedDevice Device(int card, Variant v, int64_t cores, int64_t reclaimed, int64_t memory,
                       int64_t capacity = 24576) {
  return AllocatedDevice{DeviceRef{card, v}, Consumed{cores, reclaimed, memory}, capacity};
}

TEST(DraClaims, ShareOfAnAllocation) {
  const Config c;
  auto online = ShareOf({Device(0, Variant::kGuaranteed, 30, 0, 4096)}, c, "default/a");
  ASSERT_TRUE(online.ok()) << online.message();
  EXPECT_EQ(*online, (ClaimShare{Qos::kOnline, ComputePolicy::kGuaranteedBurstShare, 30, 0, 4096, false}));
  auto offline = ShareOf({Device(1, Variant::kFixed, 0, 40, 2048)}, c, "default/b");
  ASSERT_TRUE(offline.ok());
  EXPECT_EQ(*offline, (ClaimShare{Qos::kOffline, ComputePolicy::kFixedShare, 0, 40, 2048, false}));
  auto multi =
      ShareOf({Device(0, Variant::kFixedOnline, 50, 0, 8192), Device(1, Variant::kFixedOnline, 50, 0, 8192)},
              c, "d/m");
  ASSERT_TRUE(multi.ok());
  EXPECT_EQ(multi->core_per_card, 50);
  // A whole device, and a share of the whole memory with no core, own the card's compute.
  auto whole = ShareOf({Device(2, Variant::kWhole, 0, 0, 0, 81920)}, c, "d/w");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, (ClaimShare{Qos::kOnline, ComputePolicy::kFixedShare, 100, 0, 81920, true}));
  auto all_memory = ShareOf({Device(0, Variant::kNative, 0, 0, 24576)}, c, "d/all");
  ASSERT_TRUE(all_memory.ok());
  EXPECT_EQ(all_memory->core_per_card, 100);
  EXPECT_EQ(all_memory->policy, ComputePolicy::kNativeBurstShare);

  const auto refusal = [&](const std::vector<AllocatedDevice>& d) {
    auto s = ShareOf(d, c, "default/x");
    return s.ok() ? std::string() : s.message();
  };
  EXPECT_NE(refusal({Device(0, Variant::kFixed, 0, 0, 1024)}).find("consumed no core"), std::string::npos);
  EXPECT_NE(refusal({Device(0, Variant::kFixed, 30, 30, 1024)}).find("not both"), std::string::npos);
  EXPECT_NE(refusal({Device(0, Variant::kFixed, 2, 0, 1024)}).find("between 5 and 100"), std::string::npos);
  EXPECT_NE(refusal({Device(0, Variant::kFixed, 50, 0, 1024), Device(1, Variant::kFixed, 50, 0, 1024)})
                .find("takes offline shares"),
            std::string::npos);
  EXPECT_NE(
      refusal({Device(0, Variant::kFixedOnline, 50, 0, 1024), Device(1, Variant::kFixedOnline, 40, 0, 1024)})
          .find("different amounts"),
      std::string::npos);
  EXPECT_NE(refusal({Device(0, Variant::kFixedOnline, 50, 0, 1024),
                     Device(1, Variant::kGuaranteedOnline, 50, 0, 1024)})
                .find("different kinds"),
            std::string::npos);
  EXPECT_NE(refusal({}).find("has no device"), std::string::npos);
  EXPECT_EQ(refusal({Device(0, Variant::kFixed, 0, 0, 1024)}).rfind("claim default/x", 0), 0u);
}

TEST(DraClaims, ReadConsumedTakesQuantitiesAsTheAllocatorWritesThem) {
  auto c = ReadConsumed(
      json::parse(R"({"consumedCapacity": {"cores": "30", "memory": "1004Mi", "reclaimedCores": "0"}})"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (Consumed{30, 0, 1004}));
  auto big = ReadConsumed(json::parse(R"({"consumedCapacity": {"cores": "0", "memory": "24Gi"}})"));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->memory_mib, 24576);
  EXPECT_EQ(ReadConsumed(json::parse(R"({"device": "gpu-0-whole"})"))->memory_mib, 0);
  EXPECT_FALSE(ReadConsumed(json::parse(R"({"consumedCapacity": {"cores": "1.5"}})")).ok());
}

// The extender's claim informer counts only allocated claims of the driver, and each on the cards of its
// node.
TEST(ReadClaim, CountsTheDriversAllocationOnItsNodesCards) {
  const Config config;
  EXPECT_FALSE(*ReadClaim(test::Claim("pending", "u0", nullptr), config));
  EXPECT_FALSE(*ReadClaim(
      test::Claim("theirs", "u1", json::array({test::Result("gpu-0", nullptr, "node-a", "gpu.example.com")})),
      config));
  const auto fails = [&](json results, const std::string& why) {
    Result<std::optional<ClaimFacts>> read = ReadClaim(test::Claim("bad", "u2", std::move(results)), config);
    ASSERT_FALSE(read.ok()) << why;
    EXPECT_NE(read.message().find(why), std::string::npos) << read.message();
    EXPECT_NE(read.message().find("default/bad"), std::string::npos) << read.message();
  };
  fails(json::array({test::Result("card-0", {{"cores", "30"}, {"memory", "1Gi"}})}), "not a device name");
  fails(json::array({test::Result("gpu-0-fixed", {{"cores", "half"}, {"memory", "1Gi"}})}), "gpu-0-fixed");
  fails(json::array({test::Result("gpu-0-fixed-online", {{"cores", "30"}, {"memory", "1Gi"}}, "node-a"),
                     test::Result("gpu-1-fixed-online", {{"cores", "30"}, {"memory", "1Gi"}}, "node-b")}),
        "two pools");

  const NodeState node =
      MakeNodeState("node-a", *testobj::NodeOf(testobj::Node("node-a", 2, 16384)).inventory, config);
  Result<std::optional<ClaimFacts>> two = ReadClaim(
      test::Claim("two", "u3",
                  json::array({test::Result("gpu-0-fixed-online", {{"cores", "40"}, {"memory", "2Gi"}}),
                               test::Result("gpu-1-fixed-online", {{"cores", "40"}, {"memory", "2Gi"}})})),
      config);
  ASSERT_TRUE(two.ok() && *two);
  EXPECT_EQ((*two)->node, "node-a");
  Result<HeldShare> held = HeldOn(**two, node, config);
  ASSERT_TRUE(held.ok()) << held.message();
  ASSERT_EQ(held->request.containers.size(), 1u);
  EXPECT_EQ(held->request.containers[0].core, 80);
  EXPECT_EQ(held->request.containers[0].card_count, 2);
  EXPECT_EQ(held->request.Key(), "default/two");
  EXPECT_EQ(held->assignment.containers[0].cards,
            (std::vector<CardShare>{{"node-a-gpu0", 40, 0, 2048}, {"node-a-gpu1", 40, 0, 2048}}));
  NodeState counted = node;
  EXPECT_TRUE(Apply(counted, held->request, held->assignment).ok());

  Result<std::optional<ClaimFacts>> whole =
      ReadClaim(test::Claim("whole", "u4", json::array({test::Result("gpu-1-whole", nullptr)})), config);
  Result<HeldShare> card = HeldOn(**whole, node, config);
  ASSERT_TRUE(card.ok()) << card.message();
  EXPECT_TRUE(card->request.dedicated);
  EXPECT_EQ(card->assignment.containers[0].cards[0].memory_mib, node.cards[1].capacity_mib);
  EXPECT_FALSE(Apply(counted, card->request, card->assignment).ok());  // the share above is on card 1
  NodeState alone = node;
  EXPECT_TRUE(Apply(alone, card->request, card->assignment).ok());

  Result<std::optional<ClaimFacts>> far =
      ReadClaim(test::Claim("far", "u5",
                            json::array({test::Result("gpu-7-fixed", {{"cores", "30"}, {"memory", "1Gi"}})})),
                config);
  Result<HeldShare> none = HeldOn(**far, node, config);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("does not have"), std::string::npos) << none.message();
}

// A pod of containers "c" (and "d") holding the claim entries `claims`, their specs `specs`.
json ClaimPod(const std::map<std::string, std::vector<std::string>>& claims) {
  json pod = {{"metadata", {{"name", "p"}, {"namespace", "default"}}}, {"spec", {{"containers", json::array()}}}};
  for (const auto& [container, names] : claims) {
    json c = {{"name", container}, {"image", "x"}, {"resources", {{"claims", json::array()}}}};
    for (const std::string& n : names) c["resources"]["claims"].push_back({{"name", n}});
    pod["spec"]["containers"].push_back(c);
  }
  return pod;
}

// The pod as the webhook leaves it (the annotations set, D/dra-limits), read back as the extender reads it.
Result<PodRequest> ReadBack(json pod, const ClaimsAsLimits& asked) {
  for (const auto& [k, v] : asked.annotations) pod["metadata"]["annotations"][k] = v;
  pod["metadata"]["annotations"][Config().Names().dra_limits] = json(asked.limits).dump();
  Result<std::optional<json>> written = WithDraLimits(pod, Config());
  if (!written.ok()) return written.error();
  return ParsePodRequest(**written, Config());
}

// A hand-written claim of every shape /mutate writes reads back as the request it was written from: the
// extender counts it as it counts /mutate's pod of that request.
TEST(LimitsOfClaims, EveryShapeReadsBackAsTheRequestItStandsFor) {
  const Config config;
  struct Shape {
    PodRequest pod;
    ContainerRequest c;
  };
  const Shape shapes[] = {
      {Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(30, 0, 4096)},
      {Pod(Qos::kOffline, ComputePolicy::kGuaranteedBurstShare), Container(0, 40, 2048)},
      {Pod(Qos::kOnline, ComputePolicy::kNativeBurstShare), Container(100, 0, 16384, 2)},
      {Pod(Qos::kOnline, ComputePolicy::kFixedShare, true), Container(200, 0, 2, 2)},
  };
  for (const Shape& s : shapes) {
    const json spec = ClaimSpecFor(s.pod, s.c, config);
    auto asked = LimitsOfClaims(ClaimPod({{"c", {"gpu"}}}), {{"gpu", spec}}, config);
    ASSERT_TRUE(asked.ok()) << asked.message();
    ASSERT_TRUE(asked->has_value()) << spec.dump();
    Result<PodRequest> back = ReadBack(ClaimPod({{"c", {"gpu"}}}), **asked);
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->qos, s.pod.qos) << spec.dump();
    EXPECT_EQ(back->dedicated, s.pod.dedicated) << spec.dump();
    if (!s.pod.dedicated) {
      EXPECT_EQ(back->compute_policy, s.pod.compute_policy) << spec.dump();
    }
    ASSERT_EQ(back->containers.size(), 1u);
    EXPECT_EQ(back->containers[0].card_count, s.c.card_count) << spec.dump();
    EXPECT_EQ(back->containers[0].CorePerCard(), s.c.CorePerCard()) << spec.dump();
    EXPECT_EQ(back->containers[0].ReclaimedCorePerCard(), s.c.ReclaimedCorePerCard()) << spec.dump();
    if (!s.pod.dedicated) {
      EXPECT_EQ(back->containers[0].MemoryPerCardMiB(), s.c.MemoryPerCardMiB());
    }
  }
}

// Memory rounds up to memoryUnitMiB; a claim two containers hold counts once; claims of other drivers and
// missing specs count nothing.
TEST(LimitsOfClaims, UnitsSharedAndForeignClaims) {
  Config config;

  config.memory_unit_mib = 10;
  const json spec = ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(30, 0, 4095), config);
  auto shared = LimitsOfClaims(ClaimPod({{"c", {"gpu"}}, {"d", {"gpu"}}}), {{"gpu", spec}}, config);
  ASSERT_TRUE(shared.ok() && shared->has_value()) << shared.message();
  EXPECT_EQ((*shared)->limits, (std::map<std::string, std::map<std::string, std::string>>{
                                   {"c", {{config.Names().core, "30"}, {config.Names().memory, "410"}}}}));

  const json foreign = json::parse(
      R"({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}})");
  auto none = LimitsOfClaims(ClaimPod({{"c", {"gpu", "missing"}}}), {{"gpu", foreign}}, config);
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_FALSE(none->has_value());
}

// <driver>/gpu, in limits or requests alone, is whole cards (the claim kube-scheduler makes of the whole
// class): the extender reads it as a dedicated_cores pod on that many cards, and the pod needs no D/dra-gpu.
TEST(LimitsOfClaims, TheExtendedResourceIsWholeCards) {
  const Config config;
  const ResourceNames names = config.Names();
  for (const char* kind : {"limits", "requests"}) {
    json pod = ClaimPod({{"c", {}}, {"d", {}}});
    pod["spec"]["containers"][1]["resources"][kind] = {{WholeCardResource(config), "2"}};
    auto whole = LimitsOfClaims(pod, {}, config);
    ASSERT_TRUE(whole.ok() && whole->has_value()) << whole.message();
    EXPECT_TRUE((*whole)->extended_resource);
    EXPECT_EQ((*whole)->limits, (std::map<std::string, std::map<std::string, std::string>>{
                                    {"d", {{names.core, "200"}, {names.memory, "2"}}}}));
    EXPECT_EQ((*whole)->annotations, (Annotations{{std::string(kQosLevelAnnotation), "dedicated_cores"},
                                                  {names.gpu_count, "2"}}));
    Result<PodRequest> back = ReadBack(pod, **whole);
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_TRUE(back->dedicated);
    ASSERT_EQ(back->containers.size(), 1u);
    EXPECT_EQ(back->containers[0].name, "d");
    EXPECT_EQ(back->containers[0].card_count, 2);
    EXPECT_EQ(back->containers[0].CorePerCard(), 100);
  }
  // A claim of the whole class on one card beside it is another card count: not one mgpu pod.
  json mixed = ClaimPod({{"c", {"gpu"}}, {"d", {}}});
  mixed["spec"]["containers"][1]["resources"]["limits"] = {{WholeCardResource(config), "2"}};
  const json one_card = ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare, true), Container(100, 0, 0), config);
  auto refused = LimitsOfClaims(mixed, {{"gpu", one_card}}, config);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.message(),
            "pod default/p asks dedicated_cores on 1 card in container c but dedicated_cores on 2 cards in "
            "container d; one mgpu pod is one kind of share on one number of cards");
  json none = ClaimPod({{"c", {}}});
  none["spec"]["containers"][0]["resources"]["limits"] = {{WholeCardResource(config), "0"}};
  auto zero = LimitsOfClaims(none, {}, config);
  ASSERT_TRUE(zero.ok()) << zero.message();
  EXPECT_FALSE(zero->has_value());
}

// What cannot be one mgpu pod is one sentence naming the pod: a claim that breaks a rule, two shares in a
// container, different kinds in two containers.
TEST(LimitsOfClaims, RefusesWhatIsNotOneMgpuPod) {
  const Config config;
  const json online = ClaimSpecFor(Pod(Qos::kOnline, ComputePolicy::kFixedShare), Container(30, 0, 4096), config);
  const json offline =
      ClaimSpecFor(Pod(Qos::kOffline, ComputePolicy::kFixedShare), Container(0, 40, 2048), config);
  json no_memory = online;
  no_memory["devices"]["requests"][0]["exactly"]["capacity"]["requests"].erase("memory");
  const struct {
    json pod;
    std::map<std::string, json> specs;
    std::string says;
  } cases[] = {
      {ClaimPod({{"c", {"a"}}}), {{"a", no_memory}}, "pod default/p claim a request gpu asks no memory"},
      {ClaimPod({{"c", {"a", "b"}}}), {{"a", online}, {"b", online}},
       "pod default/p container c holds 2 shares of mgpu.io classes; mgpu counts one claim per container"},
      {ClaimPod({{"c", {"a"}}, {"d", {"b"}}}), {{"a", online}, {"b", offline}},
       "pod default/p asks shared_cores fixed-share on 1 card in container c but reclaimed_cores fixed-share on 1 "
       "card in container d; one mgpu pod is one kind of share on one number of cards"},
  };
  for (const auto& c : cases) {
    auto asked = LimitsOfClaims(c.pod, c.specs, config);
    ASSERT_FALSE(asked.ok()) << c.says;
    EXPECT_NE(asked.message().find(c.says), std::string::npos) << asked.message();
  }
}

}  // namespace
}  // namespace mgpu::dra
