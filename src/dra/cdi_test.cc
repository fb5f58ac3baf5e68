#include "dra/cdi.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/file.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

const std::vector<Card> kCards = {{0, "GPU-a", "NVIDIA A10", 24576, true}};

TEST(Cdi, NamesOfSpecsAndDevices) {
  Config config;
  config.dra.cdi_directory = "/var/run/cdi";
  EXPECT_EQ(CdiKind(config), "mgpu.io/claim");
  EXPECT_EQ(CdiDeviceId("u-1", config), "mgpu.io/claim=u-1");
  EXPECT_EQ(CdiSpecPath("u-1", config), "/var/run/cdi/mgpu.io-claim-u-1.json");
  EXPECT_EQ(ClaimUidOfSpecFile("mgpu.io-claim-u-1.json", config), "u-1");
  for (const char* other : {"mgpu.io-claim-.json", "nvidia.com-gpu.json", "mgpu.io-claim-u-1.json.tmp", "x"})
    EXPECT_EQ(ClaimUidOfSpecFile(other, config), "") << other;
}

// The claim's spec carries what a device-plugin container of the same share is handed by its two Allocate
// responses, merged as the kubelet merges them; only the token is the claim's own.
TEST(Cdi, AClaimGetsTheDevicePluginEnvironmentOfTheSameShare) {
  const Config config;
  const auto env = node::BuildContainerEnvironment(kCards, Resource::kCore, 30, 4096, config.isolation,
                                                   ComputePolicy::kGuaranteedBurstShare, "claim-uid");
  auto core = node::BuildEnvironment({Resource::kCore, kCards, 30}, config.isolation,
                                     ComputePolicy::kGuaranteedBurstShare);
  auto memory = node::BuildEnvironment({Resource::kMemory, kCards, 4096}, config.isolation,
                                       ComputePolicy::kGuaranteedBurstShare);
  auto expected = core.envs;
  expected.insert(memory.envs.begin(), memory.envs.end());
  expected["MGPU_CONTAINER_TOKEN"] = "claim-uid";
  EXPECT_EQ(env.envs, expected);
  EXPECT_EQ(env.envs.at("MGPU_CORE_PERCENT"), "30");
  EXPECT_EQ(env.envs.at("MGPU_MEMORY_MIB"), "4096");
  EXPECT_EQ(env.envs.at("MGPU_QOS_LEVEL"), "online");
  EXPECT_EQ(env.envs.at("MGPU_COMPUTE_POLICY"), "guaranteed-burst-share");
  // Both responses mount the guard and its preload: once each in the claim's spec.
  EXPECT_EQ(env.mounts, core.mounts);
  EXPECT_EQ(env.mounts.size(), 3u);

  const json spec = CdiSpec("claim-uid", env, {"/dev/nvidia0", "/dev/nvidiactl"}, config);
  EXPECT_EQ(spec["cdiVersion"], "0.6.0");
  EXPECT_EQ(spec["kind"], "mgpu.io/claim");
  ASSERT_EQ(spec["devices"].size(), 1u);
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(spec["devices"][0]["name"], "claim-uid");
  EXPECT_NE(std::find(edits["env"].begin(), edits["env"].end(), "MGPU_VISIBLE_CARDS=GPU-a"),
            edits["env"].end());
  EXPECT_EQ(edits["env"].size(), env.envs.size());
  EXPECT_EQ(edits["mounts"][0]["options"], json::array({"ro", "nosuid", "nodev", "bind"}));
  EXPECT_EQ(edits["mounts"][2]["options"][0], "rw");  // the card's guard state directory
  EXPECT_EQ(edits["deviceNodes"], json::array({{{"path", "/dev/nvidia0"}}, {{"path", "/dev/nvidiactl"}}}));
}

TEST(Cdi, AnOfflineClaimWithoutIsolationHasNoMountsOrDeviceNodes) {
  Config config;
  config.isolation.backend = IsolationBackend::kNone;
  const auto env = node::BuildContainerEnvironment(kCards, Resource::kReclaimedCore, 40, 2048,
                                                   config.isolation, ComputePolicy::kFixedShare, "u");
  EXPECT_EQ(env.envs.at("MGPU_RECLAIMED_CORE_PERCENT"), "40");
  EXPECT_EQ(env.envs.at("MGPU_QOS_LEVEL"), "offline");
  EXPECT_FALSE(env.envs.count("MGPU_CONTAINER_TOKEN"));
  const json edits = CdiSpec("u", env, {}, config)["devices"][0]["containerEdits"];
  EXPECT_FALSE(edits.contains("mounts"));
  EXPECT_FALSE(edits.contains("deviceNodes"));
}

TEST(Cdi, SpecsAreWrittenWholeListedAndRemoved) {
  testing::TempDir dir;
  Config config;
  config.dra.cdi_directory = dir.path() + "/cdi";  // created on first write
  EXPECT_TRUE(ListCdiSpecs(config).empty());
  const json spec = CdiSpec("u-1", {}, {}, config);
  ASSERT_TRUE(WriteCdiSpec(CdiSpecPath("u-1", config), spec).ok());
  ASSERT_TRUE(WriteCdiSpec(CdiSpecPath("u-2", config), spec).ok());
  dir.Write("cdi/other-vendor.json", "{}");
  auto listed = ListCdiSpecs(config);
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, (std::vector<std::string>{"u-1", "u-2"}));
  EXPECT_EQ(json::parse(*ReadFile(CdiSpecPath("u-1", config))), spec);
  struct stat st;
  ASSERT_EQ(stat(CdiSpecPath("u-1", config).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_FALSE(std::filesystem::exists(CdiSpecPath("u-1", config) + ".tmp"));
  ASSERT_TRUE(RemoveCdiSpec(CdiSpecPath("u-1", config)).ok());
  EXPECT_TRUE(RemoveCdiSpec(CdiSpecPath("u-1", config)).ok());  // already gone
  EXPECT_EQ(ListCdiSpecs(config), std::vector<std::string>{"u-2"});
}

}  // namespace
}  // namespace mgpu::dra
