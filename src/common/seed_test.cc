// The seed scenarios of tests/fixtures/seed-scenarios, under resourceDomain vke.volcengine.com.
#include <gtest/gtest.h>

#include "common/allocator.h"
#include "common/manifest.h"
#include "common/test_util.h"

namespace mgpu {
namespace {

const std::string kSeeds = std::string(MGPU_FIXTURES_DIR) + "/seed-scenarios/";

Config Volcengine() {
  Config c;
  c.resource_domain = "vke.volcengine.com";
  return c;
}

std::vector<ManifestPod> Load(const std::string& file) {
  auto pods = PodsOfManifests(test::ReadFile(kSeeds + file));
  EXPECT_TRUE(pods.ok()) << (pods.ok() ? "" : pods.message());
  return pods.ok() ? *pods : std::vector<ManifestPod>{};
}

TEST(Seeds, OnlineAndOfflineReplicasShareOneCard) {
  const auto pods = Load("online-offline.yaml");
  ASSERT_EQ(pods.size(), 4u);
  NodeState node = test::Node("n", 1, 24576, Volcengine());
  for (const ManifestPod& m : pods) {
    PodRequest req = test::MustParse(m.pod, Volcengine(), m.workload);
    EXPECT_EQ(req.compute_policy,
              ComputePolicy::kGuaranteedBurstShare);  // from the Deployment, not the template
    auto a = ChooseCards(node, req);
    ASSERT_TRUE(a.ok()) << a.message();
    ASSERT_TRUE(Apply(node, req, *a).ok());
  }
  EXPECT_EQ(node.cards[0].usage.core, 60);
  EXPECT_EQ(node.cards[0].usage.reclaimed_core, 60);
  EXPECT_EQ(node.cards[0].usage.memory_mib, 16384);
  EXPECT_EQ(node.cards[0].usage.offline_holders, 2);
}

TEST(Seeds, EmrStylePodTakesThirtyPercentAndFourGiB) {
  const auto pods = Load("emr-style.yaml");
  ASSERT_EQ(pods.size(), 1u);
  PodRequest req = test::MustParse(pods[0].pod, Volcengine());
  EXPECT_EQ(req.qos, Qos::kOnline);
  ASSERT_EQ(req.containers.size(), 1u);
  EXPECT_EQ(req.containers[0].core, 30);
  EXPECT_EQ(req.containers[0].memory_mib, 4096);
}

TEST(Seeds, EveryBadRequestIsRejectedWithItsSentence) {
  const std::map<std::string, std::string> expected = {
      {"core-without-memory",
       "pod default/core-without-memory container c: vke.volcengine.com/mgpu-memory is required with "
       "vke.volcengine.com/mgpu-core"},
      {"core-150",
       "pod default/core-150 container c: vke.volcengine.com/mgpu-core 150 is above 100, so it must be a "
       "multiple of "
       "100 (whole cards) or come with vke.volcengine.com/gpu-count"},
      {"core-too-small",
       "pod default/core-too-small container c: vke.volcengine.com/mgpu-core 2 is below the minimum of 5 "
       "(minCorePercent)"},
      {"online-asks-reclaimed",
       "pod default/online-asks-reclaimed container c: vke.volcengine.com/reclaimed-mgpu-core is for offline "
       "pods, but "
       "this pod is shared_cores (online)"},
      {"offline-multi-card",
       "pod default/offline-multi-card container c: offline pods use one card, but "
       "vke.volcengine.com/gpu-count is 2"},
      {"offline-native-burst",
       "pod default/offline-native-burst: offline pods share a card only under fixed-share or "
       "guaranteed-burst-share, "
       "but vke.volcengine.com/mgpu-compute-policy is native-burst-share"},
      {"unknown-qos",
       "pod default/unknown-qos: katalyst.kubewharf.io/qos_level \"premium_cores\" is not one of "
       "shared_cores, "
       "reclaimed_cores, dedicated_cores"},
      {"uneven-split",
       "pod default/uneven-split container c: vke.volcengine.com/mgpu-core 61 does not divide evenly over 2 "
       "cards"},
  };
  const auto pods = Load("bad-requests.yaml");
  ASSERT_EQ(pods.size(), expected.size());
  for (const ManifestPod& m : pods) {
    const std::string name = m.pod["metadata"]["name"];
    auto r = ParsePodRequest(m.pod, Volcengine(), m.workload);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.message(), expected.at(name));
  }
}

// What a cache keeps of a pod reads the same as the whole pod, for every seed pod (bad ones included) and the
// pod kube-scheduler sends.
TEST(Seeds, KeptSchedulingFieldsReadTheSame) {
  std::vector<nlohmann::json> pods;
  for (const char* file : {"online-offline.yaml", "emr-style.yaml", "bad-requests.yaml"})
    for (const ManifestPod& m : Load(file)) pods.push_back(m.pod);
  pods.push_back(nlohmann::json::parse(
      test::ReadFile(std::string(MGPU_FIXTURES_DIR) + "/kube-scheduler/v1.32/cache-filter-001.json"))["Pod"]);
  ASSERT_GT(pods.size(), 5u);
  for (nlohmann::json pod : pods) {
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = pod.dump();
    pod["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "rs"},
                                           {"controller", true}, {"uid", "x"}}};
    nlohmann::json kept = pod;
    KeepSchedulingFields(kept, Volcengine());
    EXPECT_LT(kept.dump().size(), pod.dump().size() / 2);
    const Result<PodRequest> whole = ParsePodRequest(pod, Volcengine()), slim = ParsePodRequest(kept, Volcengine());
    ASSERT_EQ(whole.ok(), slim.ok());
    if (whole.ok()) {
      EXPECT_EQ(whole->containers, slim->containers);
      EXPECT_EQ(whole->qos, slim->qos);
      EXPECT_EQ(whole->compute_policy, slim->compute_policy);
      EXPECT_EQ(whole->Key(), slim->Key());
      EXPECT_EQ(whole->gpu_models, slim->gpu_models);
    } else {
      EXPECT_EQ(whole.message(), slim.message());
    }
    EXPECT_EQ(HostRequestOf(pod), HostRequestOf(kept));
    ASSERT_TRUE(ControllerOf(kept).has_value());
    EXPECT_EQ(ControllerOf(kept)->name, "rs");
    EXPECT_EQ(kept["metadata"].value("resourceVersion", ""), pod["metadata"].value("resourceVersion", ""));
  }
}

}  // namespace
}  // namespace mgpu

namespace mgpu {
namespace {

TEST(Seeds, GpuShareIsTheLargerOfCoreAndMemoryOfTheWholeCard) {
  EXPECT_DOUBLE_EQ(GpuShare(CardShare{"c", 30, 0, 4096}, 24576), 0.3);         // core beats 4096/24576
  EXPECT_DOUBLE_EQ(GpuShare(CardShare{"c", 10, 0, 12288}, 24576), 0.5);        // memory beats core
  EXPECT_DOUBLE_EQ(GpuShare(CardShare{"c", 0, 40, 2048}, 81920), 0.4);         // reclaimed core counts
  EXPECT_DOUBLE_EQ(GpuShare(CardShare{"c", 0, 0, 2048}, 0), 0.0);              // unknown card: core only
}

}  // namespace
}  // namespace mgpu
