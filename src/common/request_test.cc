#include "common/request.h"

#include <gtest/gtest.h>

#include "common/codec.h"
#include "common/pod_facts.h"
#include "common/test_util.h"

namespace mgpu {
namespace {

using test::MustParse;
using test::Yaml;

// A pod with one container `c` asking `limits` (a YAML flow mapping) and the given annotations.
nlohmann::json Pod(const std::string& limits, const std::string& annotations = "{}") {
  return Yaml("metadata: {name: p, namespace: ns, uid: u1, annotations: " + annotations +
              "}\nspec: {containers: [{name: c, resources: {limits: " + limits + "}}]}");
}

std::string Error(const nlohmann::json& pod, const Config& config = Config(),
                  const Annotations& workload = {}) {
  auto r = ParsePodRequest(pod, config, workload);
  return r.ok() ? "(parsed)" : r.message();
}

// The informer keeps only what the rules read (KeepSchedulingFields); a malformed container list must be
// refused alike after it (found by fuzz/pod_request_fuzz.cc: a string in place of the list was dropped).
TEST(Request, ASlimmedPodIsRefusedAsTheFullOneIs) {
  for (const char* spec : {R"({"containers": "BestEffort"})", R"({"containers": [7]})",
                           R"({"initContainers": {"name": "c"}, "containers": []})"}) {
    nlohmann::json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}}},
                          {"spec", nlohmann::json::parse(spec)}};
    const Result<PodRequest> full = ParsePodRequest(pod, Config());
    KeepSchedulingFields(pod, Config());
    const Result<PodRequest> slim = ParsePodRequest(pod, Config());
    EXPECT_EQ(full.ok(), slim.ok()) << spec;
    if (!full.ok() && !slim.ok()) {
      EXPECT_EQ(full.message(), slim.message()) << spec;
    }
  }
}

// The extender's pod cache keeps what tells it the kubelet admitted a pod (PodFacts::admitted): status.hostIP
// of a pod still Pending, and the phase.
TEST(Request, ASlimmedPodKeepsWhatSaysTheKubeletAdmittedIt) {
  nlohmann::json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}}},
                        {"spec", {{"nodeName", "n"}, {"containers", nlohmann::json::array()}}},
                        {"status",
                         {{"phase", "Pending"},
                          {"hostIP", "10.0.0.7"},
                          {"podIP", "10.1.0.9"},
                          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}}}}};
  KeepSchedulingFields(pod, Config());
  EXPECT_EQ(pod["status"], (nlohmann::json{{"phase", "Pending"}, {"hostIP", "10.0.0.7"}}));
  EXPECT_TRUE(ReadPod(pod, Config()).admitted);
  pod["status"].erase("hostIP");
  EXPECT_FALSE(ReadPod(pod, Config()).admitted);
}

TEST(Request, OnlinePodWithCoreAndMemory) {
  PodRequest r = MustParse(Pod("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 4096}"));
  EXPECT_EQ(r.Key(), "ns/p");
  EXPECT_EQ(r.uid, "u1");
  EXPECT_EQ(r.qos, Qos::kOnline);
  EXPECT_FALSE(r.dedicated);
  EXPECT_EQ(r.compute_policy, ComputePolicy::kFixedShare);
  ASSERT_EQ(r.containers.size(), 1u);
  EXPECT_EQ(r.containers[0], (ContainerRequest{"c", false, 30, 0, 4096, 1}));
}

TEST(Request, OfflinePodByAnnotationOrByAskingReclaimedCore) {
  for (const char* annotations : {"{katalyst.kubewharf.io/qos_level: reclaimed_cores}", "{}"}) {
    PodRequest r =
        MustParse(Pod("{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 4096}", annotations));
    EXPECT_EQ(r.qos, Qos::kOffline) << annotations;
    ASSERT_EQ(r.containers.size(), 1u);
    EXPECT_EQ(r.containers[0], (ContainerRequest{"c", false, 0, 30, 4096, 1}));
  }
}

TEST(Request, PodWithoutGpuResourcesHasNoContainers) {
  PodRequest r = MustParse(Pod("{cpu: 1, example.com/gpu: 2}"));
  EXPECT_FALSE(r.AsksForGpu());
  EXPECT_FALSE(MustParse(Yaml("metadata: {name: x}\nspec: {}")).AsksForGpu());
}

TEST(Request, MultiCardFromCoreAboveOneHundredOrFromGpuCount) {
  PodRequest whole = MustParse(Pod("{mgpu.io/mgpu-core: 200, mgpu.io/mgpu-memory: 8192}"));
  EXPECT_EQ(whole.containers[0].card_count, 2);
  EXPECT_EQ(whole.containers[0].CorePerCard(), 100);
  EXPECT_EQ(whole.containers[0].MemoryPerCardMiB(), 4096);
  PodRequest split =
      MustParse(Pod("{mgpu.io/mgpu-core: 60, mgpu.io/mgpu-memory: 8192}", "{mgpu.io/gpu-count: '2'}"));
  EXPECT_EQ(split.containers[0].card_count, 2);
  EXPECT_EQ(split.containers[0].CorePerCard(), 30);
}

TEST(Request, RequestsDefaultToLimitsAndMustEqualThem) {
  auto pod = Yaml(R"(
metadata: {name: p, namespace: ns}
spec:
  containers:
  - name: c
    resources:
      requests: {mgpu.io/mgpu-core: "30", mgpu.io/mgpu-memory: 4Ki}
)");
  EXPECT_EQ(MustParse(pod).containers[0].memory_mib, 4096);
  auto differ = Yaml(R"(
metadata: {name: p, namespace: ns}
spec:
  containers:
  - name: c
    resources:
      limits: {mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 4096}
      requests: {mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 2048}
)");
  EXPECT_EQ(Error(differ),
            "pod ns/p container c: requests (2048) and limits (4096) of mgpu.io/mgpu-memory differ; extended "
            "resources "
            "need them equal");
}

TEST(Request, MemoryIsCountedInTheConfiguredUnit) {
  Config config;
  config.memory_unit_mib = 16;
  PodRequest r = MustParse(Pod("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 256}"), config);
  EXPECT_EQ(r.containers[0].memory_mib, 4096);
}

// At admission users' MiB are read: each card's part rounded up to whole devices, the rules' sentences
// naming the amount as written.
TEST(Request, MemoryWrittenInMiBRoundsEachCardUpToTheUnit) {
  Config config;
  config.memory_unit_mib = 16;
  const auto mib = [&](const std::string& limits, const std::string& annotations = "{}") {
    auto r = ParsePodRequest(Pod(limits, annotations), config, {}, MemoryCount::kMiB);
    return r.ok() ? r->containers[0].memory_mib : -1;
  };
  EXPECT_EQ(mib("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 4096}"), 4096);
  EXPECT_EQ(mib("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1000}"), 1008);
  EXPECT_EQ(mib("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1}"), 16);
  EXPECT_EQ(mib("{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 1000}"), 1008);
  // 2 × 1000 MiB: 63 devices a card, where 2000 MiB as one amount would be 125 (odd, not two equal parts).
  EXPECT_EQ(mib("{mgpu.io/mgpu-core: 200, mgpu.io/mgpu-memory: 2000}"), 2016);
  auto uneven = ParsePodRequest(Pod("{mgpu.io/mgpu-core: 200, mgpu.io/mgpu-memory: 1001}"), config, {},
                                MemoryCount::kMiB);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.message(), "pod ns/p container c: mgpu.io/mgpu-memory 1001 does not divide evenly over 2 cards");
  // Stored pods count devices, as the kubelet does.
  EXPECT_EQ(MustParse(Pod("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 63}"), config).containers[0].memory_mib,
            1008);
}

// A pod at admission counts MiB until the webhook has rewritten it (its annotation says so).
TEST(Request, MemoryCountAtAdmissionFollowsTheRewritesAnnotation) {
  EXPECT_EQ(MemoryCountAtAdmission(Pod("{mgpu.io/mgpu-memory: 4096}"), Config()), MemoryCount::kMiB);
  EXPECT_EQ(MemoryCountAtAdmission(Pod("{mgpu.io/mgpu-memory: 256}", R"({mgpu.io/mgpu-memory-mib: '{"c":4096}'})"),
                                   Config()),
            MemoryCount::kDevices);
}

// The rewrite: every container's limits and requests in devices, the amounts as written kept, and a pod
// whose annotations are missing gets the map first; a pod without mgpu-memory gets no patch.
TEST(Request, MemoryUnitsPatchRewritesLimitsAndRequestsAndKeepsWhatWasWritten) {
  Config config;
  config.memory_unit_mib = 16;
  auto pod = Yaml(R"(
metadata: {name: p, namespace: ns}
spec:
  initContainers:
  - {name: warm, resources: {limits: {mgpu.io/mgpu-core: 10, mgpu.io/mgpu-memory: 1000}}}
  containers:
  - {name: sidecar, resources: {limits: {cpu: 1}}}
  - name: main
    resources:
      limits: {mgpu.io/mgpu-core: 50, mgpu.io/mgpu-memory: 4Ki}
      requests: {mgpu.io/mgpu-core: 50, mgpu.io/mgpu-memory: 4Ki}
)");
  auto asked = ParsePodRequest(pod, config, {}, MemoryCount::kMiB);
  ASSERT_TRUE(asked.ok()) << asked.message();
  const nlohmann::json stored = pod.patch(MemoryUnitsPatch(pod, *asked, config));
  EXPECT_EQ(stored["spec"]["initContainers"][0]["resources"]["limits"]["mgpu.io/mgpu-memory"], "63");
  EXPECT_EQ(stored["spec"]["containers"][1]["resources"]["limits"]["mgpu.io/mgpu-memory"], "256");
  EXPECT_EQ(stored["spec"]["containers"][1]["resources"]["requests"]["mgpu.io/mgpu-memory"], "256");
  EXPECT_EQ(nlohmann::json::parse(stored["metadata"]["annotations"]["mgpu.io/mgpu-memory-mib"].get<std::string>()),
            nlohmann::json({{"warm", 1000}, {"main", "4Ki"}}));
  EXPECT_EQ(MemoryCountAtAdmission(stored, config), MemoryCount::kDevices);
  // Read back as stored, it holds what was asked at admission.
  auto read = ParsePodRequest(stored, config);
  ASSERT_TRUE(read.ok()) << read.message();
  EXPECT_EQ(read->containers, asked->containers);
  EXPECT_TRUE(MemoryUnitsPatch(Pod("{cpu: 1}"), MustParse(Pod("{cpu: 1}")), config).empty());
}

TEST(Request, ReadsInitAndAppContainersAndSkipsThoseWithoutGpu) {
  auto pod = Yaml(R"(
metadata: {name: p, namespace: ns}
spec:
  initContainers:
  - {name: warm, resources: {limits: {mgpu.io/mgpu-core: 10, mgpu.io/mgpu-memory: 1024}}}
  containers:
  - {name: sidecar, resources: {limits: {cpu: 1}}}
  - {name: main, resources: {limits: {mgpu.io/mgpu-core: 50, mgpu.io/mgpu-memory: 2048}}}
)");
  PodRequest r = MustParse(pod);
  ASSERT_EQ(r.containers.size(), 2u);
  EXPECT_EQ(r.containers[0].name, "warm");
  EXPECT_TRUE(r.containers[0].init);
  EXPECT_EQ(r.containers[1].name, "main");
  EXPECT_FALSE(r.containers[1].init);
}

TEST(Request, AnnotationsComeFromThePodThenItsWorkload) {
  const Annotations workload = {{"katalyst.kubewharf.io/qos_level", "reclaimed_cores"},
                                {"mgpu.io/mgpu-compute-policy", "guaranteed-burst-share"},
                                {"mgpu.io/gpu-policy", "spread"},
                                {"mgpu.io/node-policy", "spread"}};
  PodRequest r =
      MustParse(Pod("{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 4096}"), Config(), workload);
  EXPECT_EQ(r.qos, Qos::kOffline);
  EXPECT_EQ(r.compute_policy, ComputePolicy::kGuaranteedBurstShare);
  EXPECT_EQ(r.card_policy, CardPolicy::kSpread);
  EXPECT_EQ(r.node_policy, NodePolicy::kSpread);
  // The pod's own annotation wins.
  PodRequest own = MustParse(Pod("{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 4096}",
                                 "{mgpu.io/mgpu-compute-policy: fixed-share}"),
                             Config(), workload);
  EXPECT_EQ(own.compute_policy, ComputePolicy::kFixedShare);
}

TEST(Request, DefaultsComeFromConfig) {
  Config config;
  config.default_compute_policy = ComputePolicy::kNativeBurstShare;
  config.default_card_policy = CardPolicy::kSpread;
  config.default_node_policy = NodePolicy::kSpread;
  PodRequest r = MustParse(Pod("{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 4096}"), config);
  EXPECT_EQ(r.compute_policy, ComputePolicy::kNativeBurstShare);
  EXPECT_EQ(r.card_policy, CardPolicy::kSpread);
  EXPECT_EQ(r.node_policy, NodePolicy::kSpread);
}

TEST(Request, DedicatedCoresTakeWholeCards) {
  PodRequest r = MustParse(Pod("{mgpu.io/mgpu-core: 200, mgpu.io/mgpu-memory: 16384}",
                               "{katalyst.kubewharf.io/qos_level: dedicated_cores}"));
  EXPECT_TRUE(r.dedicated);
  EXPECT_EQ(r.qos, Qos::kOnline);
  EXPECT_EQ(r.containers[0].card_count, 2);
  EXPECT_EQ(Error(Pod("{mgpu.io/mgpu-core: 50, mgpu.io/mgpu-memory: 1024}",
                      "{katalyst.kubewharf.io/qos_level: dedicated_cores}")),
            "pod ns/p container c: dedicated_cores pods take whole cards, so mgpu.io/mgpu-core must be 100, "
            "got 50");
}

// Every rule of DESIGN §3, each with the sentence a user sees.
TEST(Request, RejectsEveryBrokenRuleWithOneSentence) {
  struct Case {
    std::string limits, annotations, error;
  };
  const std::vector<Case> cases = {
      {"{mgpu.io/mgpu-core: 30}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-memory is required with mgpu.io/mgpu-core"},
      {"{mgpu.io/mgpu-memory: 30}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-core is required with mgpu.io/mgpu-memory for an online pod"},
      {"{mgpu.io/mgpu-core: 150, mgpu.io/mgpu-memory: 4096}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-core 150 is above 100, so it must be a multiple of 100 (whole "
       "cards) or "
       "come with mgpu.io/gpu-count"},
      {"{mgpu.io/mgpu-core: 2, mgpu.io/mgpu-memory: 1024}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-core 2 is below the minimum of 5 (minCorePercent)"},
      {"{mgpu.io/mgpu-core: 8, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/gpu-count: '2'}",
       "pod ns/p container c: mgpu.io/mgpu-core 4 per card is below the minimum of 5 (minCorePercent)"},
      {"{mgpu.io/mgpu-core: 200, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/gpu-count: '1'}",
       "pod ns/p container c: mgpu.io/mgpu-core 200 is above 100"},
      {"{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 1024}",
       "{katalyst.kubewharf.io/qos_level: shared_cores}",
       "pod ns/p container c: mgpu.io/reclaimed-mgpu-core is for offline pods, but this pod is shared_cores "
       "(online)"},
      {"{mgpu.io/reclaimed-mgpu-core: 60, mgpu.io/mgpu-memory: 8192}",
       "{katalyst.kubewharf.io/qos_level: reclaimed_cores, mgpu.io/gpu-count: '2'}",
       "pod ns/p container c: offline pods use one card, but mgpu.io/gpu-count is 2"},
      {"{mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 1024}",
       "{katalyst.kubewharf.io/qos_level: reclaimed_cores, mgpu.io/mgpu-compute-policy: native-burst-share}",
       "pod ns/p: offline pods share a card only under fixed-share or guaranteed-burst-share, but "
       "mgpu.io/mgpu-compute-policy is native-burst-share"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}",
       "{katalyst.kubewharf.io/qos_level: premium_cores}",
       "pod ns/p: katalyst.kubewharf.io/qos_level \"premium_cores\" is not one of shared_cores, "
       "reclaimed_cores, "
       "dedicated_cores"},
      {"{mgpu.io/mgpu-core: 61, mgpu.io/mgpu-memory: 8192}", "{mgpu.io/gpu-count: '2'}",
       "pod ns/p container c: mgpu.io/mgpu-core 61 does not divide evenly over 2 cards"},
      {"{mgpu.io/mgpu-core: 60, mgpu.io/mgpu-memory: 8191}", "{mgpu.io/gpu-count: '2'}",
       "pod ns/p container c: mgpu.io/mgpu-memory 8191 does not divide evenly over 2 cards"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/reclaimed-mgpu-core: 30, mgpu.io/mgpu-memory: 1024}",
       "{katalyst.kubewharf.io/qos_level: reclaimed_cores}",
       "pod ns/p container c: an offline pod must not ask for mgpu.io/mgpu-core (it uses "
       "mgpu.io/reclaimed-mgpu-core)"},
      {"{mgpu.io/reclaimed-mgpu-core: 30}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-memory is required with mgpu.io/reclaimed-mgpu-core"},
      {"{mgpu.io/mgpu-memory: 1024}", "{katalyst.kubewharf.io/qos_level: reclaimed_cores}",
       "pod ns/p container c: mgpu.io/reclaimed-mgpu-core is required with mgpu.io/mgpu-memory for an "
       "offline pod"},
      {"{mgpu.io/reclaimed-mgpu-core: 130, mgpu.io/mgpu-memory: 1024}", "{}",
       "pod ns/p container c: mgpu.io/reclaimed-mgpu-core 130 is above 100 (offline pods use one card)"},
      {"{mgpu.io/reclaimed-mgpu-core: 3, mgpu.io/mgpu-memory: 1024}", "{}",
       "pod ns/p container c: mgpu.io/reclaimed-mgpu-core 3 is below the minimum of 5 (minCorePercent)"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/gpu-count: 'two'}",
       "pod ns/p: mgpu.io/gpu-count \"two\" is not a whole number from 1 to 128"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/gpu-count: '0'}",
       "pod ns/p: mgpu.io/gpu-count \"0\" is not a whole number from 1 to 128"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/mgpu-compute-policy: best-effort}",
       "pod ns/p: mgpu.io/mgpu-compute-policy \"best-effort\" is not one of fixed-share, "
       "guaranteed-burst-share, "
       "native-burst-share"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/gpu-policy: random}",
       "pod ns/p: mgpu.io/gpu-policy \"random\" is not one of binpack, spread, fragmentation"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1024}", "{mgpu.io/node-policy: random}",
       "pod ns/p: mgpu.io/node-policy \"random\" is not one of binpack, spread, fragmentation"},
      {"{mgpu.io/mgpu-core: 30.5, mgpu.io/mgpu-memory: 1024}", "{}",
       "pod ns/p container c: limits of mgpu.io/mgpu-core: 30.5 is not a whole number"},
      {"{mgpu.io/mgpu-core: '30', mgpu.io/mgpu-memory: '1.1Ki'}", "{}",
       "pod ns/p container c: limits of mgpu.io/mgpu-memory: \"1.1Ki\" is not a whole number"},
      {"{mgpu.io/mgpu-core: 30, mgpu.io/mgpu-memory: 1099511627777}", "{}",
       "pod ns/p container c: mgpu.io/mgpu-memory 1099511627777 is larger than any card"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Error(Pod(c.limits, c.annotations)), c.error) << c.limits << " " << c.annotations;
  }
}

TEST(Request, MalformedPodsAreErrorsNotCrashes) {
  EXPECT_EQ(Error(nlohmann::json::array()), "the pod is not a JSON object");
  EXPECT_EQ(Error(Yaml("metadata: {name: p, namespace: ns}\nspec: {containers: 3}")),
            "pod ns/p: spec.containers is not a list");
  // Odd shapes inside a container are read as "asks for nothing" rather than crashing.
  EXPECT_FALSE(
      MustParse(Yaml("metadata: 1\nspec: {containers: [1, {resources: 2}, {resources: {limits: 3}}]}"))
          .AsksForGpu());
}

TEST(Request, HostRequestIsKubeSchedulersEffectiveRequest) {
  const auto pod = nlohmann::json::parse(R"({"spec": {
    "initContainers": [
      {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
      {"name": "setup", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}],
    "containers": [
      {"name": "a", "resources": {"requests": {"cpu": "1.5", "memory": "2Gi"}}},
      {"name": "b", "resources": {"limits": {"cpu": "500m"}}},
      {"name": "c"}],
    "overhead": {"cpu": "100m", "memory": "1M"}}})");
  const HostRequest r = HostRequestOf(pod);
  // CPU: the setup container beside the sidecar (4.25) beats the app containers and sidecar (2.25).
  EXPECT_EQ(r.cpu_milli, 4250 + 100);
  // Memory: containers and sidecar (2112 MiB) beat setup beside the sidecar (1088); 1M = 0.95 MiB -> 1.
  EXPECT_EQ(r.memory_mib, 2048 + 64 + 1);
  EXPECT_EQ(HostRequestOf(nlohmann::json::parse(R"({"spec": {"containers": [
    {"resources": {"requests": {"cpu": "lots", "memory": 12}}}]}})"))
                .cpu_milli,
            0);  // unreadable: 0
  auto parsed = ParsePodRequest(pod, Config());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->cpu_milli, 4350);  // also for pods asking no GPU
}

TEST(Request, GpuModelsComeFromTheNodeSelectorAndRequiredAffinity) {
  const std::string label = "mgpu.io/gpu.product";
  const auto models = [&](const std::string& spec) {
    return GpuModelsOf(nlohmann::json::parse(R"({"spec": )" + spec + "}"), label);
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(models(R"({})"), V{});
  EXPECT_EQ(models(R"({"nodeSelector": {"mgpu.io/gpu.product": "T4", "zone": "a"}})"), V{"T4"});
  const std::string affinity =
      R"({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
    {"nodeSelectorTerms": [
      {"matchExpressions": [{"key": "mgpu.io/gpu.product", "operator": "In", "values": ["V100", "A10"]}]},
      {"matchExpressions": [{"key": "mgpu.io/gpu.product", "operator": "In", "values": ["T4"]}]}]}}}})";
  EXPECT_EQ(models(affinity), (V{"A10", "T4", "V100"}));
  // A term that does not name the label allows any model.
  EXPECT_EQ(models(R"({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
    {"nodeSelectorTerms": [
      {"matchExpressions": [{"key": "mgpu.io/gpu.product", "operator": "In", "values": ["T4"]}]},
      {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}})"),
            V{});
  // Both: what both allow.
  auto both = nlohmann::json::parse(affinity);
  both["nodeSelector"] = {{"mgpu.io/gpu.product", "T4"}};
  EXPECT_EQ(models(both.dump()), V{"T4"});
  auto parsed = ParsePodRequest(
      nlohmann::json::parse(R"({"spec": {"nodeSelector": {"mgpu.io/gpu.product": "A10"}}})"), Config());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->gpu_models, V{"A10"});
}

TEST(Request, ControllerOfReadsTheControllingOwner) {
  auto pod = Yaml(R"(
metadata:
  name: p
  ownerReferences:
  - {apiVersion: v1, kind: Node, name: n, controller: false}
  - {apiVersion: apps/v1, kind: ReplicaSet, name: web-5d9c, controller: true}
)");
  auto owner = ControllerOf(pod);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->kind, "ReplicaSet");
  EXPECT_EQ(owner->name, "web-5d9c");
  EXPECT_EQ(owner->api_version, "apps/v1");
  EXPECT_FALSE(ControllerOf(Yaml("metadata: {name: p}")).has_value());
}

}  // namespace
}  // namespace mgpu

namespace mgpu {
namespace {

TEST(PodFacts, ReadsIdentityPlaceAndTheHandOffAnnotationsOnce) {
  const Config config;
  const ResourceNames names = config.Names();
  const Assignment assigned{{ContainerAssignment{"main", {CardShare{"GPU-a", 30, 0, 4096}}}}};
  nlohmann::json pod = {{"metadata",
                         {{"name", "p"},
                          {"uid", "u-1"},
                          {"resourceVersion", "7"},
                          {"annotations",
                           {{names.gpu_assignment, EncodeAssignment(assigned)},
                            {names.gpu_allocated, "not an assignment"},
                            {names.gpu_assume_time, EncodeAssumeTime(42)}}}}},
                        {"spec", {{"nodeName", "node-a"}}},
                        {"status", {{"phase", "Running"}}}};
  PodFacts facts = ReadPod(pod, config);
  EXPECT_EQ(facts.key, "default/p");  // no namespace: "default"
  EXPECT_EQ(facts.uid, "u-1");
  EXPECT_EQ(facts.resource_version, "7");
  EXPECT_EQ(facts.node, "node-a");
  EXPECT_TRUE(facts.HoldsNode());
  EXPECT_EQ(facts.assignment, assigned);
  EXPECT_FALSE(facts.allocated.has_value());
  EXPECT_EQ(facts.assume_time_ns, 42);
  ASSERT_EQ(facts.problems.size(), 1u);
  EXPECT_NE(facts.problems[0].find(names.gpu_allocated), std::string::npos) << facts.problems[0];

  pod["status"]["phase"] = "Succeeded";
  pod["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z";
  facts = ReadPod(pod, config);
  EXPECT_TRUE(facts.finished);
  EXPECT_TRUE(facts.deleting);
  EXPECT_FALSE(facts.HoldsNode());
  EXPECT_TRUE(ReadPod(nlohmann::json::array(), config).key.empty());  // not an object: nothing
}

// One read gives the request too, with the workload's annotations, and the pod's CPU and memory whether or
// not the request parses.
TEST(PodFacts, ReadPodGivesTheRequestWithTheWorkloadsAnnotationsAndTheHostRequest) {
  const Config config;
  const ResourceNames names = config.Names();
  nlohmann::json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u-1"}}},
      {"spec",
       {{"containers",
         {{{"name", "main"},
           {"resources",
            {{"limits",
              {{names.reclaimed_core, "30"}, {names.memory, "1024"}, {"cpu", "2"}, {"memory", "1Gi"}}}}}}}}}},
      {"status",
       {{"containerStatuses", {{{"name", "main"}, {"containerID", "containerd://1"}}, {{"name", "side"}}}}}}};
  const PodFacts plain = ReadPod(pod, config);
  ASSERT_TRUE(plain.request.ok()) << plain.request.message();
  EXPECT_EQ(plain.request->qos, Qos::kOffline);  // asks reclaimed core, no QoS annotation
  EXPECT_EQ(plain.request->uid, "u-1");
  EXPECT_EQ(plain.host, (HostRequest{2000, 1024}));
  EXPECT_EQ(plain.started, std::set<std::string>{"main"});
  const PodFacts annotated = ReadPod(pod, config, {{std::string(kQosLevelAnnotation), "bogus"}});
  ASSERT_FALSE(annotated.request.ok());
  EXPECT_NE(annotated.request.message().find("bogus"), std::string::npos) << annotated.request.message();
  EXPECT_EQ(annotated.host, (HostRequest{2000, 1024}));  // read though the request is not
  EXPECT_EQ(annotated.key, "ns/p");
}

// Answers a workload's annotations and notes who asked.
struct NotingSource final : WorkloadSource {
  Annotations answer;
  std::vector<std::string> asked;  // "namespace/pod Kind/name"
  Annotations AnnotationsOf(const std::string& ns, const std::string& pod, const OwnerRef& owner) override {
    asked.push_back(ns + "/" + pod + " " + owner.kind + "/" + owner.name);
    return answer;
  }
};

TEST(PodFacts, OnlyAControlledPodThatAsksForAnMgpuResourceAsksForItsWorkload) {
  const Config config;
  const ResourceNames names = config.Names();
  NotingSource source;
  source.answer = {{names.compute_policy, "guaranteed-burst-share"}};
  nlohmann::json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ns"}}},
      {"spec", {{"containers", {{{"name", "main"}, {"resources", {{"limits", {{"cpu", "1"}}}}}}}}}}};
  EXPECT_TRUE(ReadPod(pod, config, source).request.ok());  // no controller
  pod["metadata"]["ownerReferences"] = {
      {{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "r"}, {"controller", true}}};
  EXPECT_TRUE(ReadPod(pod, config, source).request.ok());  // asks no mgpu resource
  EXPECT_TRUE(source.asked.empty());
  pod["spec"]["containers"][0]["resources"]["limits"] = {{names.core, "30"}, {names.memory, "1024"}};
  const PodFacts facts = ReadPod(pod, config, source);
  ASSERT_TRUE(facts.request.ok()) << facts.request.message();
  EXPECT_EQ(facts.request->compute_policy, ComputePolicy::kGuaranteedBurstShare);
  // Once, though the request reads several keys of it.
  EXPECT_EQ(source.asked, std::vector<std::string>{"ns/p ReplicaSet/r"});
  // The pod's own annotation comes first.
  pod["metadata"]["annotations"][names.compute_policy] = "fixed-share";
  EXPECT_EQ(ReadPod(pod, config, source).request->compute_policy, ComputePolicy::kFixedShare);
}

}  // namespace
}  // namespace mgpu
