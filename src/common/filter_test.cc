#include "common/filter.h"

#include <gtest/gtest.h>

#include "common/test_objects.h"

namespace mgpu {
namespace {

using namespace testobj;

// A pod of one container asking `core` mgpu-core and `memory_mib` on one card.
PodRequest Ask(int core, int64_t memory_mib = 1024) {
  PodRequest pod;
  pod.containers.push_back(ContainerRequest{"c", false, core, 0, memory_mib, 1});
  return pod;
}

// The filter both the extender and kubectl mgpu why run: every candidate gets exactly one answer, and each
// failing node's cause is counted once.
TEST(FilterPodTest, AnswersEveryCandidateOnceWithItsCause) {
  const Config config;
  ClusterCache cache(config);
  cache.UpsertNode(NodeOf(Node("roomy", 1)));
  cache.UpsertNode(NodeOf(Node("tight", 1)));
  cache.UpsertPod(PodOf(Placed(Pod("holder", 80, 1024), "tight", config.Names().gpu_allocated,
                               OneCard("tight-gpu0", 80, 1024))));
  nlohmann::json bad = Node("bad", 1);
  bad["metadata"]["annotations"][config.Names().gpu_inventory] = "{not json";
  cache.UpsertNode(NodeOf(bad));
  const std::shared_ptr<const ClusterView> view = cache.Snapshot();
  const std::vector<std::string> names = {"bad", "plain", "roomy", "tight"};
  ModelPublisher model;
  DecisionMemo memo;

  const FilterVerdicts gpu = FilterPod(*view, names, Ask(50), model, memo, config);
  EXPECT_EQ(gpu.passed, std::vector<size_t>{2});
  ASSERT_EQ(gpu.failed.size(), 3u);
  EXPECT_EQ(gpu.failed.at("bad"), view->Find("bad")->problem);
  EXPECT_NE(gpu.failed.at("plain").find("no " + config.Names().gpu_inventory), std::string::npos);
  EXPECT_NE(gpu.failed.at("tight").find("20"), std::string::npos) << gpu.failed.at("tight");
  EXPECT_EQ(gpu.no_inventory, 1u);
  EXPECT_EQ(gpu.bad_inventory, 1u);
  EXPECT_EQ(gpu.insufficient, 1u);
  EXPECT_TRUE(gpu.unresolvable.empty());
  EXPECT_FALSE(model.Current().model->Empty()) << "a GPU pod is learned";

  PodRequest cpu_only;
  const FilterVerdicts plain = FilterPod(*view, names, cpu_only, model, memo, config);
  EXPECT_EQ(plain.passed, (std::vector<size_t>{0, 1, 2, 3})) << "a pod asking for no GPU passes everywhere";
  EXPECT_TRUE(plain.failed.empty());

  const FilterVerdicts invalid =
      FilterPod(*view, names, Result<PodRequest>(Error{"mgpu-core 150 is over 100"}), model, memo, config);
  EXPECT_TRUE(invalid.passed.empty());
  ASSERT_EQ(invalid.unresolvable.size(), names.size());
  EXPECT_EQ(invalid.unresolvable.at("roomy"), "mgpu-core 150 is over 100");
  EXPECT_EQ(invalid.no_inventory + invalid.bad_inventory + invalid.insufficient, 0u);
}

}  // namespace
}  // namespace mgpu
