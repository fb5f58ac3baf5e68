#include "deviceplugin/node_pods.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/codec.h"

namespace mgpu::dp {
namespace {

using nlohmann::json;

Config TestConfig() {
  Config config;
  config.memory_unit_mib = 1024;
  return config;
}

// A pod whose containers ask {name, core, memory units}; `assigned` cards per container (empty: none).
json Pod(const std::string& name, const std::vector<std::tuple<std::string, int, int>>& containers,
         const std::vector<std::string>& assigned = {}) {
  const ResourceNames names = Config().Names();
  json specs = json::array();
  Assignment assignment;
  for (size_t i = 0; i < containers.size(); ++i) {
    const auto& [container, core, units] = containers[i];
    specs.push_back(
        {{"name", container},
         {"resources",
          {{"limits", {{names.core, std::to_string(core)}, {names.memory, std::to_string(units)}}}}}});
    if (i < assigned.size())
      assignment.containers.push_back({container, {CardShare{assigned[i], core, 0, int64_t{units} * 1024}}});
  }
  json pod = {
      {"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", "uid-" + name}, {"resourceVersion", "7"}}},
      {"spec", {{"nodeName", "n"}, {"containers", specs}}},
      {"status", {{"phase", "Pending"}}}};
  if (!assignment.containers.empty()) {
    pod["metadata"]["annotations"] = {{names.gpu_assignment, EncodeAssignment(assignment)},
                                      {names.gpu_assume_time, "5"}};
  }
  return pod;
}

std::vector<std::string> Names(const std::vector<PendingContainer>& pending) {
  std::vector<std::string> out;
  for (const auto& p : pending) out.push_back(p.pod + ":" + p.container);
  std::sort(out.begin(), out.end());
  return out;
}

json WithAssumeTime(json pod, int64_t ns) {
  pod["metadata"]["annotations"][Config().Names().gpu_assume_time] = std::to_string(ns);
  return pod;
}

TEST(ReadNodePod, ReadsWhatTheHandOffNeeds) {
  json pod = Pod("p", {{"main", 20, 2}, {"side", 10, 1}}, {"GPU-b", "GPU-a"});
  pod["status"]["containerStatuses"] = {{{"name", "side"}, {"containerID", "containerd://1"}},
                                        {{"name", "main"}, {"state", {{"waiting", json::object()}}}}};
  const NodePod p = ReadNodePod(pod, TestConfig());
  EXPECT_EQ(p.key, "ns/p");
  EXPECT_EQ(p.uid, "uid-p");
  EXPECT_EQ(p.resource_version, "7");
  EXPECT_TRUE(p.active);
  ASSERT_TRUE(p.containers.has_value());
  ASSERT_EQ(p.containers->size(), 2u);
  EXPECT_EQ((*p.containers)[0].memory_mib, 2048);
  ASSERT_TRUE(p.assignment.has_value());
  EXPECT_EQ(p.assignment->Find("side")->cards[0].uuid, "GPU-a");
  EXPECT_EQ(p.assume_time_ns, 5);
  EXPECT_FALSE(p.allocated.has_value());
  EXPECT_EQ(p.started, (std::set<std::string>{"side"}));
  EXPECT_TRUE(p.problems.empty());
}

TEST(ReadNodePod, FinishedOrDeletedPodsAreInactiveAndBadAnnotationsAreProblems) {
  json done = Pod("done", {{"main", 20, 2}});
  done["status"]["phase"] = "Succeeded";
  EXPECT_FALSE(ReadNodePod(done, TestConfig()).active);
  json leaving = Pod("leaving", {{"main", 20, 2}});
  leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z";
  EXPECT_FALSE(ReadNodePod(leaving, TestConfig()).active);

  json bad = Pod("bad", {{"main", 20, 2}});
  bad["metadata"]["annotations"] = {{Config().Names().gpu_assignment, "{not json"},
                                    {Config().Names().gpu_assume_time, "soon"}};
  const NodePod p = ReadNodePod(bad, TestConfig());
  EXPECT_FALSE(p.assignment.has_value());
  ASSERT_EQ(p.problems.size(), 2u);
  EXPECT_NE(p.problems[0].find("pod ns/bad has an unreadable mgpu.io/gpu-assignment"), std::string::npos)
      << p.problems[0];

  const NodePod garbage = ReadNodePod(json::array({1, 2}), TestConfig());
  EXPECT_FALSE(garbage.containers.has_value());
  EXPECT_EQ(garbage.problems.size(), 1u);
}

TEST(FindPending, OffersAssignedContainersThatHaveNotGotTheResource) {
  const Config config = TestConfig();
  json started = Pod("started", {{"main", 20, 2}}, {"GPU-a"});
  started["status"]["containerStatuses"] = {{{"name", "main"}, {"containerID", "containerd://1"}}};
  json failed = Pod("failed", {{"main", 20, 2}}, {"GPU-a"});
  failed["status"]["phase"] = "Failed";
  const std::vector<NodePod> pods = {
      ReadNodePod(Pod("fresh", {{"main", 20, 2}}, {"GPU-a"}), config),
      ReadNodePod(Pod("held", {{"main", 20, 2}}, {"GPU-a"}), config),
      ReadNodePod(Pod("handed", {{"main", 20, 2}}, {"GPU-a"}), config),
      ReadNodePod(started, config),
      ReadNodePod(failed, config),
      ReadNodePod(Pod("memory-only", {{"main", 20, 2}}, {"GPU-b"}), config),
  };
  AllocatedPods allocated = {{"ns/held", Assignment{{{"main", {CardShare{"GPU-a", 20, 0, 0}}}}}},
                             {"ns/memory-only", Assignment{{{"main", {CardShare{"GPU-b", 0, 0, 2048}}}}}}};
  const HandedOutCards handed = {{{"uid-handed", "main", Resource::kCore}, {"GPU-a"}}};
  const Pending core = FindPending(pods, Resource::kCore, 20, allocated, handed, config);
  EXPECT_EQ(Names(core.candidates), (std::vector<std::string>{"ns/fresh:main", "ns/memory-only:main"}));
  EXPECT_TRUE(core.explained);
  EXPECT_EQ(core.candidates[0].pod_uid, "uid-fresh");
  EXPECT_EQ(core.candidates[0].assume_time_ns, 5);
  const Pending memory = FindPending(pods, Resource::kMemory, 2, allocated, handed, config);
  EXPECT_EQ(Names(memory.candidates),
            (std::vector<std::string>{"ns/fresh:main", "ns/handed:main", "ns/held:main"}));
  // No container waits for 30% core: the kubelet's pod is not in sight.
  EXPECT_FALSE(FindPending(pods, Resource::kCore, 30, allocated, handed, config).explained);
  EXPECT_TRUE(FindPending(pods, Resource::kReclaimedCore, 20, allocated, handed, config).candidates.empty());
}

// The kubelet admitted the younger look-alike first and the plugin gave it the elder's card: the elder is
// now offered the younger's card, whichever member the earlier preference was matched to.
TEST(FindPending, LookAlikesAreOnePool) {
  const Config config = TestConfig();
  const std::vector<NodePod> pods = {
      ReadNodePod(WithAssumeTime(Pod("elder", {{"main", 20, 2}}, {"GPU-a"}), 1), config),
      ReadNodePod(WithAssumeTime(Pod("younger", {{"main", 20, 2}}, {"GPU-b"}), 2), config),
      ReadNodePod(WithAssumeTime(Pod("other-shape", {{"main", 30, 2}}, {"GPU-c"}), 3), config),
  };
  const AllocatedPods younger_on_a = {
      {"ns/younger", Assignment{{{"main", {CardShare{"GPU-a", 20, 0, 2048}}}}}}};
  const Pending after_swap = FindPending(pods, Resource::kCore, 20, younger_on_a, {}, config);
  ASSERT_EQ(Names(after_swap.candidates), (std::vector<std::string>{"ns/elder:main", "ns/other-shape:main"}));
  EXPECT_EQ(after_swap.candidates[0].pod, "ns/elder");
  EXPECT_EQ(after_swap.candidates[0].cards[0].uuid, "GPU-b");
  EXPECT_EQ(after_swap.candidates[0].cards[0].core, 20);
  EXPECT_EQ(after_swap.candidates[0].pool_size, 2);
  // The same before PodResources shows it, when the hand-out was matched to the elder.
  const HandedOutCards matched_elder = {{{"uid-elder", "main", Resource::kCore}, {"GPU-a"}}};
  const Pending unsettled = FindPending(pods, Resource::kCore, 20, {}, matched_elder, config);
  ASSERT_EQ(Names(unsettled.candidates), (std::vector<std::string>{"ns/other-shape:main", "ns/younger:main"}));
  EXPECT_EQ(unsettled.candidates[0].pod, "ns/younger");
  EXPECT_EQ(unsettled.candidates[0].cards[0].uuid, "GPU-b");
  // Memory is one pool as well; another shape keeps its own cards.
  const Pending memory = FindPending(pods, Resource::kMemory, 2, younger_on_a, {}, config);
  ASSERT_EQ(Names(memory.candidates), (std::vector<std::string>{"ns/elder:main", "ns/other-shape:main"}));
  for (const PendingContainer& c : memory.candidates)
    EXPECT_EQ(c.cards[0].uuid, c.pod == "ns/elder" ? "GPU-b" : "GPU-c");
  // A swap inside the pool is normal; cards no look-alike was assigned are not.
  EXPECT_TRUE(WithinPool(pods, pods[1], {"main", {CardShare{"GPU-a", 20, 0, 2048}}}));
  EXPECT_FALSE(WithinPool(pods, pods[1], {"main", {CardShare{"GPU-c", 20, 0, 2048}}}));
}

TEST(FindPending, APodWithoutAssignmentExplainsTheSizeButIsNoCandidate) {
  const Config config = TestConfig();
  const std::vector<NodePod> pods = {ReadNodePod(Pod("plain", {{"main", 40, 3}}), config)};
  const Pending p = FindPending(pods, Resource::kMemory, 3, {}, {}, config);
  EXPECT_TRUE(p.candidates.empty());
  EXPECT_TRUE(p.explained);
  EXPECT_FALSE(FindPending(pods, Resource::kMemory, 4, {}, {}, config).explained);
}

TEST(FindPending, ContainersKeepTheirPlaceInThePod) {
  const Config config = TestConfig();
  const std::vector<NodePod> pods = {
      ReadNodePod(Pod("two", {{"zeta", 30, 2}, {"alpha", 30, 2}}, {"GPU-b", "GPU-a"}), config)};
  const Pending p = FindPending(pods, Resource::kCore, 30, {}, {}, config);
  ASSERT_EQ(p.candidates.size(), 2u);
  EXPECT_EQ(p.candidates[0].container, "zeta");
  EXPECT_EQ(p.candidates[0].order, 0);
  EXPECT_EQ(p.candidates[1].container, "alpha");
  EXPECT_EQ(p.candidates[1].order, 1);
}

TEST(AllocationComplete, NeedsEveryResourceOfEveryAppContainer) {
  const Config config = TestConfig();
  json with_init = Pod("p", {{"main", 20, 2}});
  with_init["spec"]["initContainers"] = {
      {{"name", "init"},
       {"resources", {{"limits", {{Config().Names().core, "10"}, {Config().Names().memory, "1"}}}}}}};
  const NodePod pod = ReadNodePod(with_init, config);
  const Assignment core_only{{{"main", {CardShare{"GPU-a", 20, 0, 0}}}}};
  const Assignment both{{{"main", {CardShare{"GPU-a", 20, 0, 2048}}}}};
  const Assignment too_little{{{"main", {CardShare{"GPU-a", 20, 0, 1024}}}}};
  EXPECT_FALSE(AllocationComplete(pod, core_only));
  EXPECT_FALSE(AllocationComplete(pod, too_little));
  EXPECT_FALSE(AllocationComplete(pod, Assignment{}));
  EXPECT_TRUE(AllocationComplete(pod, both));  // the init container is never listed by PodResources

  json unparsable = Pod("u", {{"main", 20, 2}});
  unparsable["metadata"]["annotations"] = {{std::string(kQosLevelAnnotation), "bogus"}};
  EXPECT_TRUE(AllocationComplete(ReadNodePod(unparsable, config), core_only));
}

TEST(Normalized, SortsContainersAndCards) {
  const Assignment messy{{{"b", {CardShare{"GPU-2", 1, 0, 0}, CardShare{"GPU-1", 1, 0, 0}}}, {"a", {}}}};
  const Assignment tidy{{{"a", {}}, {"b", {CardShare{"GPU-1", 1, 0, 0}, CardShare{"GPU-2", 1, 0, 0}}}}};
  EXPECT_EQ(Normalized(messy), tidy);
}

}  // namespace
}  // namespace mgpu::dp
