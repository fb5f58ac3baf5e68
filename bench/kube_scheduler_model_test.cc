#include "bench/kube_scheduler_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace mgpu::bench {
namespace {

constexpr int64_t kGiB = 1024LL * 1024 * 1024;

// A 64-core, 256 GiB node with 8 cards (800 mgpu-core), 32 cores and 64 GiB of it requested.
KubeNodeView HalfCpuNode() {
  KubeNodeView v;
  v.allocatable = {64000, 256 * kGiB, {{"mgpu.io/mgpu-core", 800}}};
  v.requested = {32000, 64 * kGiB, {{"mgpu.io/mgpu-core", 200}}};
  v.nonzero_requested = v.requested;
  return v;
}

std::string WriteConfig(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/kube_scheduler_model_test.yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(NumFeasibleNodesToFind, AdaptiveDefaultOnTheOpenbCluster) {
  KubeSchedulerModel m;
  // 50 - 1213/125 = 41 %: 1213 * 41 / 100 = 497 (integer division throughout).
  EXPECT_EQ(m.NumFeasibleNodesToFind(1213), 497);
  // 5,000 nodes: 50 - 40 = 10 %.
  EXPECT_EQ(m.NumFeasibleNodesToFind(5000), 500);
  // 20,000 nodes: 50 - 160 is below 5 %, so 5 %.
  EXPECT_EQ(m.NumFeasibleNodesToFind(20000), 1000);
  // Under 100 nodes: all of them; 150 nodes at 49 % would be 73, raised to 100.
  EXPECT_EQ(m.NumFeasibleNodesToFind(99), 99);
  EXPECT_EQ(m.NumFeasibleNodesToFind(150), 100);
  m.percentage_of_nodes_to_score = 100;
  EXPECT_EQ(m.NumFeasibleNodesToFind(1213), 1213);
}

TEST(NodeSampler, StopsAtTheCountAndRotatesTheStartByTheNodesProcessed) {
  NodeSampler s;
  // Nodes 0..9, odd ones infeasible; find 2: nodes 0 and 2, then node 3 fails a filter (recorded) and node 4
  // is one too many (not counted): 4 processed.
  const auto even = [](size_t i) { return i % 2 == 0; };
  EXPECT_EQ(s.Sample(10, 2, even), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(s.next_start(), 4u);
  EXPECT_EQ(s.Sample(10, 2, even), (std::vector<size_t>{4, 6}));
  EXPECT_EQ(s.next_start(), 8u);
  // Wraps around: 8, then 9 fails, 0.
  EXPECT_EQ(s.Sample(10, 2, even), (std::vector<size_t>{8, 0}));
  EXPECT_EQ(s.next_start(), 2u);
  // Fewer feasible than asked: every node processed, the start comes back where it was.
  EXPECT_EQ(s.Sample(10, 20, even).size(), 5u);
  EXPECT_EQ(s.next_start(), 2u);
}

TEST(KubeScores, DefaultProfileWorkedExample) {
  const KubeSchedulerModel m;
  const KubeAmounts pod{8000, 32 * kGiB, {}};
  // LeastAllocated: cpu (64000-40000)*100/64000 = 37, memory (256-96)*100/256 = 62; (37+62)/2 = 49.
  EXPECT_EQ(m.FitScore(HalfCpuNode(), pod), 49);
  // BalancedAllocation: without the pod |0.5-0.25|/2 = 0.125 -> 87; with it |0.625-0.375|/2 = 0.125 -> 87;
  // 50 + (50 + 87 - 87)/2 = 75.
  EXPECT_EQ(m.BalancedScore(HalfCpuNode(), pod), 75);
  EXPECT_EQ(m.Score(HalfCpuNode(), pod), 124);
}

TEST(KubeScores, MissingRequestsCountAtTheDefaultsForFitOnly) {
  const KubeSchedulerModel m;
  KubeNodeView empty;
  empty.allocatable = {1000, 1 * kGiB, {}};
  // Fit: cpu 100m of 1000 -> 90; memory 200 MiB of 1 GiB -> (1024-200)*100/1024 = 80; mean 85.
  EXPECT_EQ(m.FitScore(empty, KubeAmounts{}), 85);
  // BalancedAllocation gives a pod that requests nothing 0.
  EXPECT_EQ(m.BalancedScore(empty, KubeAmounts{}), 0);
}

TEST(KubeScores, MostAllocatedAndExtendedResourcesThePodDoesNotAskFor) {
  KubeSchedulerModel m;
  m.strategy = ScoringStrategy::kMostAllocated;
  m.fit_resources = {{"cpu", 1}, {"memory", 1}, {"mgpu.io/mgpu-core", 3}};
  // A CPU-only pod: mgpu-core skipped (resource_allocation.go), cpu 40000*100/64000 = 62, memory 96/256 = 37:
  // (62+37)/2 = 49.
  EXPECT_EQ(m.FitScore(HalfCpuNode(), KubeAmounts{8000, 32 * kGiB, {}}), 49);
  // A GPU pod asking 100: mgpu-core (300*100/800 = 37) weighs 3: (62+37+3*37)/5 = 42.
  EXPECT_EQ(m.FitScore(HalfCpuNode(), KubeAmounts{8000, 32 * kGiB, {{"mgpu.io/mgpu-core", 100}}}), 42);
}

TEST(KubeScores, RequestedToCapacityRatioWorkedExample) {
  KubeSchedulerModel m;
  m.strategy = ScoringStrategy::kRequestedToCapacityRatio;
  m.shape = {{0, 0}, {100, 10}};
  // cpu 62 % -> 62, memory 37 % -> 37; round(99/2) = 50 (LeastAllocated's integer mean would say 49).
  EXPECT_EQ(m.FitScore(HalfCpuNode(), KubeAmounts{8000, 32 * kGiB, {}}), 50);
  // A resource scoring 0 leaves the mean: on an empty node memory at 0 % scores 0, cpu at 12 % scores 12.
  KubeNodeView empty;
  empty.allocatable = {64000, 256 * kGiB, {}};
  EXPECT_EQ(m.FitScore(empty, KubeAmounts{8000, 1, {}}), 12);
}

TEST(TopScoredNode, HighestScoreAndWithoutRandomnessOnTies) {
  EXPECT_EQ(TopScoredNode({3, 9, 4}), 1u);
  // All equal: container/heap's Init moves nothing and the first node is the top.
  EXPECT_EQ(TopScoredNode({5, 5, 5, 5}), 0u);
  // Equal top scores not first: Init's sift-down from index 1 (children 3, 4) then 0 (children 1, 2).
  // {1, 7, 7, 7, 0}: index 1 is 7, its child 3 is 7 (not greater) -> stays; root 1 < child 1 (7) vs child 2
  // (7): child 2 is not "less" than child 1, so child 1 (index 1) goes up.
  EXPECT_EQ(TopScoredNode({1, 7, 7, 7, 0}), 1u);
  // {1, 2, 7, 7}: index 1's child 3 (7) goes up to index 1; the root then takes index 1's 7 (node 3), as
  // child 1 and child 2 are equal and child 1 is taken.
  EXPECT_EQ(TopScoredNode({1, 2, 7, 7}), 3u);
  EXPECT_EQ(TopScoredNode({}), SIZE_MAX);
}

TEST(LoadKubeSchedulerModel, ReadsTheShippedFiles) {
  // As shipped: the extender's choose for GPU pods, its choose-cpu-only for every pod (deciding CPU-only
  // pods), kube-scheduler's adaptive sample of nodes.
  Result<KubeSchedulerModel> m =
      LoadKubeSchedulerModel(std::string(MGPU_DEPLOY_DIR) + "/extender/scheduler-config.yaml");
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->extenders.size(), 2u);
  EXPECT_EQ(m->extenders[0].filter_verb, "choose");
  EXPECT_EQ(m->extenders[1].filter_verb, "choose-cpu-only");
  EXPECT_TRUE(m->extenders[1].managed_resources.empty());
  EXPECT_EQ(m->strategy, ScoringStrategy::kLeastAllocated);
  EXPECT_TRUE(m->ExtenderDecides({"mgpu.io/mgpu-core"}));
  EXPECT_TRUE(m->ExtenderDecides({"vke.volcengine.com/mgpu-core"}));
  EXPECT_TRUE(m->ExtenderDecides({}));
  EXPECT_EQ(m->NumFeasibleNodesToFind(1213), 497);
  // The DRA pods' profile: 15 percent of the nodes, at least minFeasibleNodesToFind (100).
  EXPECT_EQ(m->profile_percentages.at("default-scheduler"), 0);
  ASSERT_TRUE(m->PercentageOf("mgpu-dra").ok());
  EXPECT_EQ(*m->PercentageOf("mgpu-dra"), 15);
  EXPECT_EQ(KubeSchedulerModel::NumFeasibleNodesToFind(1000, 15), 150);
  EXPECT_EQ(KubeSchedulerModel::NumFeasibleNodesToFind(1213, 10), 121);
  EXPECT_EQ(KubeSchedulerModel::NumFeasibleNodesToFind(1000, 10), 100);
  EXPECT_EQ(KubeSchedulerModel::NumFeasibleNodesToFind(500, 10), 100);
  EXPECT_FALSE(m->PercentageOf("mgpu-scheduler").ok());
  // The extender for GPU pods only: kube-scheduler's own scores place CPU-only pods.
  m = LoadKubeSchedulerModel(std::string(MGPU_DEPLOY_DIR) + "/extender/candidates/gpu-pods-only.yaml");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->ExtenderDecides({"mgpu.io/mgpu-core"}));
  EXPECT_FALSE(m->ExtenderDecides({}));
  // The candidate for every pod, every node looked at.
  m = LoadKubeSchedulerModel(std::string(MGPU_DEPLOY_DIR) + "/extender/candidates/every-pod-all-nodes.yaml");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->ExtenderDecides({}));
  EXPECT_EQ(m->NumFeasibleNodesToFind(1213), 1213);
}

TEST(KubeSchedulerModel, ChooseCpuOnlyDecidesOnlyPodsAskingForNoMgpuResource) {
  KubeSchedulerModel m;
  EXPECT_FALSE(m.ExtenderDecides({}));  // no extender
  m.extenders.push_back({{}, "choose-cpu-only"});
  EXPECT_TRUE(m.ExtenderDecides({}));
  EXPECT_FALSE(m.ExtenderDecides({"mgpu.io/mgpu-core"}));  // passed on every node it came with
  m.extenders.push_back({{"mgpu.io/mgpu-core"}, "filter"});
  EXPECT_TRUE(m.ExtenderDecides({"mgpu.io/mgpu-core"}));
}

TEST(LoadKubeSchedulerModel, ReadsProfileSettings) {
  Result<KubeSchedulerModel> m = LoadKubeSchedulerModel(WriteConfig(R"(
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
profiles:
  - schedulerName: default-scheduler
    percentageOfNodesToScore: 100
    plugins:
      score:
        disabled:
          - name: NodeResourcesBalancedAllocation
        enabled:
          - name: NodeResourcesFit
            weight: 5
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: RequestedToCapacityRatio
            resources:
              - name: cpu
                weight: 2
              - name: memory
            requestedToCapacityRatio:
              shape:
                - utilization: 0
                  score: 0
                - utilization: 100
                  score: 10
  - schedulerName: gpu-pods
extenders:
  - urlPrefix: https://x
    filterVerb: choose
)"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->percentage_of_nodes_to_score, 100);
  EXPECT_EQ(*m->PercentageOf("gpu-pods"), 30);  // the global one: the profile sets none
  EXPECT_EQ(m->fit_weight, 5);
  EXPECT_EQ(m->balanced_weight, 0);
  EXPECT_EQ(m->strategy, ScoringStrategy::kRequestedToCapacityRatio);
  ASSERT_EQ(m->fit_resources.size(), 2u);
  EXPECT_EQ(m->fit_resources[0].weight, 2);
  EXPECT_EQ(m->fit_resources[1].weight, 1);
  ASSERT_EQ(m->shape.size(), 2u);
  // No managedResources: the extender sees every pod.
  EXPECT_TRUE(m->ExtenderDecides({}));
}

TEST(LoadKubeSchedulerModel, RejectsAnUnknownStrategy) {
  Result<KubeSchedulerModel> m = LoadKubeSchedulerModel(WriteConfig(R"(
kind: KubeSchedulerConfiguration
profiles:
  - pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: Tightest
)"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("Tightest"), std::string::npos);
}

}  // namespace
}  // namespace mgpu::bench
