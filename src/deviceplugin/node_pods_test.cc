#include "deviceplugin/node_pods.h"

#include <gtest/gtest.h>

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
  return out;
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
  const std::set<HandedOut> handed = {{"uid-handed", "main", Resource::kCore}};
  const Pending core = FindPending(pods, Resource::kCore, 20, allocated, handed, config);
  EXPECT_EQ(Names(core.candidates), (std::vector<std::string>{"ns/fresh:main", "ns/memory-only:main"}));
  EXPECT_TRUE(core.explained);
  EXPECT_EQ(core.candidates[0].pod_uid, "uid-fresh");
  EXPECT_EQ(core.candidates[0].assume_time_ns, 5);
  const Pending memory = FindPending(pods, Resource::kMemory, 2, allocated, handed, config);
  EXPECT_EQ(Names(memory.candidates),
            (std::vector<std::string>{"ns/fresh:main", "ns/held:main", "ns/handed:main"}));
  // No container waits for 30% core: the kubelet's pod is not in sight.
  EXPECT_FALSE(FindPending(pods, Resource::kCore, 30, allocated, handed, config).explained);
  EXPECT_TRUE(FindPending(pods, Resource::kReclaimedCore, 20, allocated, handed, config).candidates.empty());
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
