#include "common/filter.h"

#include <gtest/gtest.h>

#include <map>

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
  // In the words kube-scheduler shows after a count of nodes: no node names, the same words for one cause.
  EXPECT_EQ(gpu.failed.at("bad"), "unreadable " + config.Names().gpu_inventory + " annotation");
  EXPECT_EQ(gpu.failed.at("plain"),
            "no mgpu-device-plugin (no " + config.Names().gpu_inventory + " annotation)");
  EXPECT_EQ(gpu.failed.at("tight"), "no mgpu card free for 50 percent core and 1024 MiB");
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
  EXPECT_EQ(invalid.unresolvable.at("roomy"), "invalid mgpu request: mgpu-core 150 is over 100");
  EXPECT_EQ(invalid.no_inventory + invalid.bad_inventory + invalid.insufficient, 0u);
}

// kube-scheduler writes "0/N nodes are available: <count> <reason>, ..." and adds up the nodes with equal
// reasons: nodes failing for one cause must share one reason, and the reason must not hold a count of its own
// that reads as one of kube-scheduler's (the issue saw "1 no card can take ...: 1 card holding another
// compute policy, 1 ...").
TEST(FilterPodTest, ReasonsGroupByCauseInKubeSchedulersSentence) {
  const Config config;
  ClusterCache cache(config);
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) {
    const std::string node = "n" + std::to_string(i);
    names.push_back(node);
    cache.UpsertNode(NodeOf(Node(node, 2)));
    // Every card holds 80 percent: n0..n2 with fixed-share pods, n3..n5 with another compute policy on one
    // card.
    for (int card = 0; card < 2; ++card) {
      nlohmann::json holder = Pod(node + "-" + std::to_string(card), 80, 1024);
      if (i >= 3 && card == 0)
        holder["metadata"]["annotations"][config.Names().compute_policy] = "native-burst-share";
      cache.UpsertPod(PodOf(Placed(holder, node, config.Names().gpu_allocated,
                                   OneCard(node + "-gpu" + std::to_string(card), 80, 1024))));
    }
  }
  ModelPublisher model;
  DecisionMemo memo;
  const FilterVerdicts v = FilterPod(*cache.Snapshot(), names, Ask(50), model, memo, config);
  std::map<std::string, int> counts;
  for (const auto& [node, reason] : v.failed) counts[reason]++;
  EXPECT_EQ(counts, (std::map<std::string, int>{
                        {"no mgpu card free for 50 percent core and 1024 MiB", 3},
                        {"no mgpu card free for 50 percent core and 1024 MiB (cards holding another compute "
                         "policy)",
                         3}}));
}

}  // namespace
}  // namespace mgpu
