#include "dra/prepare.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "common/file.h"
#include "dra/cdi.h"
#include "dra/test_claims.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

using test::Claim;
using test::Claims;

class PrepareTest : public ::testing::Test {
 protected:
  PrepareTest()
      : state_({Card{0, "GPU-a", "NVIDIA A10", 24576, true}, Card{1, "GPU-b", "NVIDIA A10", 24576, true}}) {
    config_.dra.cdi_directory = dir_.path() + "/cdi";
    config_.dra.state_directory = dir_.path() + "/state";
    for (const Card& c : state_.Cards())
      cards_.push_back(NodeCard{c, 24576, "", {"/dev/nvidia" + std::to_string(c.index)}});
    claims_ = PreparedClaims::Open(config_.dra.state_directory + "/checkpoint.json").value();
    preparer_ = std::make_unique<Preparer>(config_, "node-a", cards_, state_, *claims_, api_);
  }

  std::string Refusal(const ClaimRef& ref) { return preparer_->Prepare(ref).error; }

  testing::TempDir dir_;
  Config config_;
  node::DeviceState state_;
  std::vector<NodeCard> cards_;
  Claims api_;
  std::unique_ptr<PreparedClaims> claims_;
  std::unique_ptr<Preparer> preparer_;
};

TEST_F(PrepareTest, PreparesOnceWritesTheSpecAndUnpreparesIdempotently) {
  api_.Put(Claim("c1", "u1",
                 json::array({test::Result("gpu-1-guaranteed",
                                           {{"cores", "30"}, {"memory", "4Gi"}, {"reclaimedCores", "0"}})})));
  const ClaimRef ref{"default", "u1", "c1"};
  const PrepareOutcome first = preparer_->Prepare(ref);
  ASSERT_EQ(first.error, "");
  ASSERT_EQ(first.devices.size(), 1u);
  EXPECT_EQ(first.devices[0],
            (PreparedDevice{
                {"gpu"}, "node-a", "gpu-1-guaranteed", "share-gpu-1-guaranteed", {"mgpu.io/claim=u1"}}));
  const json spec = json::parse(*ReadFile(CdiSpecPath("u1", config_)));
  const json& env = spec["devices"][0]["containerEdits"]["env"];
  for (const char* line :
       {"MGPU_VISIBLE_CARDS=GPU-b", "MGPU_CORE_PERCENT=30", "MGPU_MEMORY_MIB=4096", "MGPU_QOS_LEVEL=online",
        "MGPU_COMPUTE_POLICY=guaranteed-burst-share", "MGPU_CONTAINER_TOKEN=u1"})
    EXPECT_NE(std::find(env.begin(), env.end(), line), env.end()) << line;
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"], json::array({{{"path", "/dev/nvidia1"}}}));

  // Again (the kubelet retries, or restarted): answered from the checkpoint, no API read.
  EXPECT_EQ(preparer_->Prepare(ref).devices, first.devices);
  EXPECT_EQ(api_.reads, 1);
  EXPECT_EQ(preparer_->claim_reads(), 1u);
  EXPECT_EQ(claims_->Find("u1")->cdi_spec, CdiSpecPath("u1", config_));

  EXPECT_EQ(preparer_->Unprepare(ref), "");
  EXPECT_FALSE(std::filesystem::exists(CdiSpecPath("u1", config_)));
  EXPECT_FALSE(claims_->Find("u1").has_value());
  EXPECT_EQ(preparer_->Unprepare(ref), "");  // already unprepared
}

TEST_F(PrepareTest, OfflineMultiCardAndWholeClaims) {
  api_.Put(Claim("off", "u-off",
                 json::array({test::Result("gpu-0-fixed",
                                           {{"cores", "0"}, {"memory", "2Gi"}, {"reclaimedCores", "40"}})})));
  api_.Put(Claim("two", "u-two",
                 json::array({test::Result("gpu-0-fixed-online", {{"cores", "50"}, {"memory", "8Gi"}}),
                              test::Result("gpu-1-fixed-online", {{"cores", "50"}, {"memory", "8Gi"}})})));
  api_.Put(Claim("whole", "u-whole", json::array({test::Result("gpu-1-whole", nullptr)})));
  ASSERT_EQ(Refusal({"default", "u-off", "off"}), "");
  ASSERT_EQ(Refusal({"default", "u-whole", "whole"}), "");
  const PrepareOutcome two = preparer_->Prepare({"default", "u-two", "two"});
  ASSERT_EQ(two.error, "");
  ASSERT_EQ(two.devices.size(), 2u);
  EXPECT_EQ(two.devices[0].cdi_ids, std::vector<std::string>{"mgpu.io/claim=u-two"});
  EXPECT_TRUE(two.devices[1].cdi_ids.empty());  // one CDI device per claim, named once
  const auto env_of = [&](const std::string& uid) {
    return json::parse(*ReadFile(CdiSpecPath(uid, config_)))["devices"][0]["containerEdits"]["env"];
  };
  const auto has = [](const json& env, const std::string& line) {
    return std::find(env.begin(), env.end(), line) != env.end();
  };
  EXPECT_TRUE(has(env_of("u-off"), "MGPU_RECLAIMED_CORE_PERCENT=40"));
  EXPECT_TRUE(has(env_of("u-off"), "MGPU_QOS_LEVEL=offline"));
  EXPECT_TRUE(has(env_of("u-two"), "MGPU_VISIBLE_CARDS=GPU-a,GPU-b"));
  EXPECT_TRUE(has(env_of("u-two"), "MGPU_CORE_PERCENT=50"));
  EXPECT_TRUE(has(env_of("u-whole"), "MGPU_CORE_PERCENT=100"));
  EXPECT_TRUE(has(env_of("u-whole"), "MGPU_MEMORY_MIB=24576"));
}

TEST_F(PrepareTest, RefusalsNameTheClaimAndWriteNothing) {
  api_.Put(Claim("unallocated", "u1", nullptr));
  api_.Put(Claim("replaced", "u-new",
                 json::array({test::Result("gpu-0-fixed", {{"cores", "30"}, {"memory", "1Gi"}})})));
  api_.Put(Claim("elsewhere", "u3",
                 json::array({test::Result("gpu-0-fixed", {{"cores", "30"}, {"memory", "1Gi"}}, "node-b")})));
  api_.Put(Claim("unknown", "u4",
                 json::array({test::Result("gpu-9-fixed", {{"cores", "30"}, {"memory", "1Gi"}})})));
  api_.Put(
      Claim("nocore", "u5", json::array({test::Result("gpu-0-fixed", {{"cores", "0"}, {"memory", "1Gi"}})})));
  api_.Put(Claim("foreign", "u6",
                 json::array({test::Result("gpu-0", json::object(), "node-a", "gpu.nvidia.com")})));
  EXPECT_EQ(Refusal({"default", "u1", "unallocated"}), "claim default/unallocated is not allocated");
  EXPECT_NE(Refusal({"default", "u-old", "replaced"}).find("has UID u-new, not the u-old"),
            std::string::npos);
  EXPECT_NE(Refusal({"default", "u3", "elsewhere"}).find("of pool node-b, not of this node's pool node-a"),
            std::string::npos);
  EXPECT_NE(Refusal({"default", "u4", "unknown"}).find("gpu-9-fixed, which is not a device of node node-a"),
            std::string::npos);
  EXPECT_NE(Refusal({"default", "u5", "nocore"}).find("consumed no core"), std::string::npos);
  EXPECT_NE(Refusal({"default", "u6", "foreign"}).find("has no device of driver mgpu.io"), std::string::npos);
  EXPECT_NE(Refusal({"default", "u7", "missing"}).find("cannot read claim default/missing"),
            std::string::npos);
  EXPECT_NE(Refusal({"default", "", "x"}).find("without UID"), std::string::npos);
  state_.SetHealthy("GPU-a", false);
  api_.Put(
      Claim("sick", "u8", json::array({test::Result("gpu-0-fixed", {{"cores", "30"}, {"memory", "1Gi"}})})));
  EXPECT_NE(Refusal({"default", "u8", "sick"}).find("GPU-a, which is unhealthy"), std::string::npos);
  EXPECT_TRUE(ListCdiSpecs(config_).empty());
  EXPECT_TRUE(claims_->All().empty());
}

TEST_F(PrepareTest, ConcurrentCallsForOneClaimReadItOnce) {
  api_.Put(
      Claim("c", "u", json::array({test::Result("gpu-0-native", {{"cores", "20"}, {"memory", "1Gi"}})})));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] { ok += preparer_->Prepare({"default", "u", "c"}).error.empty(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(api_.reads, 1);
}

TEST_F(PrepareTest, OrphanSpecsAreRemovedAndOwnedOnesKept) {
  api_.Put(Claim("c", "u", json::array({test::Result("gpu-0-fixed", {{"cores", "20"}, {"memory", "1Gi"}})})));
  ASSERT_EQ(Refusal({"default", "u", "c"}), "");
  ASSERT_TRUE(WriteCdiSpec(CdiSpecPath("crashed", config_), CdiSpec("crashed", {}, {}, config_)).ok());
  EXPECT_EQ(preparer_->RemoveOrphanSpecs(), 1);
  EXPECT_EQ(ListCdiSpecs(config_), std::vector<std::string>{"u"});
}

}  // namespace
}  // namespace mgpu::dra
