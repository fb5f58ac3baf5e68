// mgpu's DRA mode on the real kubelet v1.36.2 with containerd v2.3.4 (scripts/cluster.sh with its kubelet
// node `localhost`): the node daemon runs on this machine as `mgpu-device-plugin --mode dra` over static
// cards (the node has no GPU), registers through the kubelet's plugin watcher, publishes the node's slices
// and prepares the claims kube-scheduler allocated; containerd applies the CDI specs. The containers print
// what they were handed: the environment of their claim's allocation and the guard (libmgpu-guard.so
// preloaded, capping memory over the fake driver of the test image). Then the daemon and the kubelet restart
// under running pods. Skipped without the Kubernetes binaries; takes the machine's one kubelet.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "common/dra.h"
#include "common/file.h"
#include "common/yaml_json.h"
#include "dra/cdi.h"
#include "dra/real_cluster.h"

namespace mgpu::testing::dra {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kRepo = MGPU_SOURCE_DIR;
const std::string kBuild = MGPU_BUILD_DIR;
constexpr auto kWait = 300s;  // a shared 2-core machine: the API server answers slowly under load
constexpr int64_t kCardMiB = 24576;

class DraKubelet : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("MGPU_DRA_KUBELET_DIR");
    const char* base = std::getenv("MGPU_DRA_KUBELET_PORT_BASE");
    cluster_ = std::make_unique<Cluster>(kRepo, dir && *dir ? dir : "/tmp/mgpu-dra-kubelet",
                                         base && *base ? base : "27020");
    bool skipped = false;
    failure_ = cluster_->Up("", skipped);
    if (skipped) skip_ = failure_;
    if (!failure_.empty()) return;
    const std::string state = cluster_->state();
    // The workload image (busybox, glibc, the guard's probe over a fake driver).
    const Output images = Sh("MGPU_BUILD_DIR=" + kBuild + " bash " + kRepo + "/scripts/test-images.sh mgpu");
    if (images.rc != 0) {
      failure_ = "test-images.sh: " + images.out;
      return;
    }
    std::istringstream tars(images.out);
    for (std::string tar; std::getline(tars, tar);) {
      if (tar.find("workload") == std::string::npos) continue;
      const Output imported = Sh(cluster_->Env("MGPU_K8S_BIN") + "/ctr --address " + state +
                                 "/containerd/containerd.sock -n k8s.io images import " + tar);
      if (imported.rc != 0) failure_ = "ctr import: " + imported.out;
    }
    std::ofstream(state + "/dra-cards.yaml")
        << "cards:\n"
        << "  - {index: 0, uuid: GPU-d7a00000-0000-4000-8000-000000000000, model: NVIDIA A10, memoryMiB: "
        << kCardMiB << ", healthy: true}\n"
        << "  - {index: 1, uuid: GPU-d7a00000-0000-4000-8000-000000000001, model: NVIDIA A10, memoryMiB: "
        << kCardMiB << ", healthy: true}\n"
        << "  - {index: 2, uuid: GPU-d7a00000-0000-4000-8000-000000000002, model: NVIDIA A10, memoryMiB: "
        << kCardMiB << ", healthy: true}\n";
    std::ofstream(state + "/dra-daemon.yaml")
        << "isolation:\n  backend: mgpu\n  guardLibraryPath: " << state << "/mgpu/lib/libmgpu-guard.so\n"
        << "  guardStateDirectory: " << state << "/mgpu/cards\n  guardLibrarySource: " << kBuild
        << "/src/guard/libmgpu-guard.so\n"
        << "devicePlugin:\n  mode: dra\n  gpuBackend: static\n  staticInventoryFile: " << state
        << "/dra-cards.yaml\n"
        << "dra:\n  kubeletRootDir: " << state << "/kubelet\n  cdiDirectory: " << state << "/cdi\n"
        << "  stateDirectory: " << state << "/dra\n"
        << "  cards: any\n";  // the examples ask every kind of share of three cards: the opt-in layout
    // A fresh node: no checkpoint or CDI spec of an earlier run in the same state folder.
    std::filesystem::remove_all(state + "/dra");
    std::filesystem::remove_all(state + "/cdi");
    StartDaemon();
    // The extender, which kube-scheduler calls for pods holding D/dra-gpu.
    if (failure_.empty()) failure_ = cluster_->StartExtender(kBuild, /*webhooks=*/false);
  }

  static void TearDownTestSuite() {
    if (cluster_ && skip_.empty() && failure_.empty())
      Sh(cluster_->kubectl() +
         " delete pods,resourceclaims --all -n default --grace-period=0 --force --wait=false");
    daemon_.reset();
    cluster_.reset();
  }

 protected:
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << "skipped: no Kubernetes binaries (" << skip_ << ")";
    ASSERT_TRUE(failure_.empty()) << failure_;
  }
  void TearDown() override {
    if (HasFailure())
      std::cerr << cluster_->Logs() << Sh("tail -30 " + cluster_->state() + "/logs/dra-daemon.log").out;
  }

  static kube::Client& Api() { return cluster_->client(); }

  static void StartDaemon() {
    const std::string state = cluster_->state();
    daemon_ = std::make_unique<Background>(
        std::vector<std::string>{kBuild + "/src/deviceplugin/mgpu-device-plugin", "--config",
                                 state + "/dra-daemon.yaml", "--kubeconfig", state + "/kubeconfig",
                                 "--node-name", "localhost"},
        state + "/logs/dra-daemon.log");
  }

  // How many times the daemon's log (every instance's, appended) says the kubelet accepted its registration.
  static int Registrations() {
    Result<std::string> log = ReadFile(cluster_->state() + "/logs/dra-daemon.log");
    int n = 0;
    for (size_t at = 0; log.ok() && (at = log->find("registered with the kubelet", at)) != std::string::npos;
         ++at)
      ++n;
    return n;
  }

  // The node's pool as published: every slice at one generation, resourceSliceCount of them.
  static int64_t PoolGeneration() {
    kube::ApiResult slices =
        Api().List(kube::kResourceSlices, "", {.field_selector = "spec.nodeName=localhost"});
    if (!slices.ok()) return 0;
    std::set<int64_t> generations;
    size_t count = 0, want = 0;
    for (const json& s : (*slices)["items"]) {
      generations.insert(s["spec"]["pool"]["generation"].get<int64_t>());
      want = s["spec"]["pool"]["resourceSliceCount"].get<size_t>();
      ++count;
    }
    return generations.size() == 1 && count == want && count > 0 ? *generations.begin() : 0;
  }

  // A ResourceClaimTemplate for one device of class mgpu.io with `cores` and `memory` (a quantity) consumed.
  static json ClaimTemplate(const std::string& name, const std::string& cores, const std::string& memory) {
    const json request = {{"name", "gpu"},
                          {"exactly",
                           {{"deviceClassName", "mgpu.io"},
                            {"capacity", {{"requests", {{"cores", cores}, {"memory", memory}}}}}}}};
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaimTemplate"},
            {"metadata", {{"name", name}}},
            {"spec", {{"spec", {{"devices", {{"requests", json::array({request})}}}}}}}};
  }

  static json Pod(const std::string& name, const std::string& template_name, const std::string& command) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"terminationGracePeriodSeconds", 1},
              {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimTemplateName", template_name}}}},
              {"containers",
               {{{"name", "c"},
                 {"image", "localhost/workload:mgpu"},
                 {"imagePullPolicy", "Never"},
                 {"command", {"/bin/sh", "-c", command}},
                 {"resources", {{"claims", {{{"name", "gpu"}}}}}}}}}}}};
  }

  static bool Running(const std::string& pod) {
    return Poll(
        [&] {
          kube::ApiResult p = Api().GetPod("default", pod);
          return p.ok() && p->value("status", json::object()).value("phase", "") == "Running";
        },
        kWait);
  }

  // What the container printed, once it printed `last`.
  static std::map<std::string, std::string> Printed(const std::string& pod, const std::string& last) {
    std::map<std::string, std::string> out;
    Poll(
        [&] {
          const Output logs = Sh(cluster_->kubectl() + " logs -n default " + pod);
          if (logs.rc != 0 || logs.out.find(last) == std::string::npos) return false;
          std::istringstream in(logs.out);
          for (std::string line; std::getline(in, line);) {
            const size_t eq = line.find('=');
            out[eq == std::string::npos ? line : line.substr(0, eq)] =
                eq == std::string::npos ? "" : line.substr(eq + 1);
          }
          return true;
        },
        kWait);
    return out;
  }

  // The claim of `pod` (made from its template, or by the scheduler for an extended resource).
  static json ClaimOf(const std::string& pod) {
    kube::ApiResult p = Api().GetPod("default", pod);
    if (!p.ok()) return nullptr;
    std::string claim;
    if (const json* s = FindPath(*p, {"status", "resourceClaimStatuses"}); s && s->is_array() && !s->empty())
      claim = (*s)[0].value("resourceClaimName", "");
    if (const json* e = FindPath(*p, {"status", "extendedResourceClaimStatus", "resourceClaimName"}))
      claim = e->get<std::string>();
    kube::ApiResult c = Api().Get(kube::kResourceClaims, "default", claim);
    return c.ok() ? c.value() : json();
  }

  static inline std::unique_ptr<Cluster> cluster_;
  static inline std::unique_ptr<Background> daemon_;
  static inline std::string skip_, failure_;
};

// deploy/examples/dra-workloads.yaml as a user applies it: an online claim, an offline one of another compute
// policy, a whole card through the extended resource; each container's environment is exactly its claim's
// allocation (cards, amounts, QoS, the card's compute policy), and nothing else is on its card.
TEST_F(DraKubelet, TheExamplesRunWithTheirClaimsEnvironment) {
  ASSERT_TRUE(Poll([] { return PoolGeneration() > 0; }, kWait)) << "the node's slices were not published";
  const Output applied =
      Sh(cluster_->kubectl() + " apply -f " + kRepo + "/deploy/examples/dra-workloads.yaml");
  ASSERT_EQ(applied.rc, 0) << applied.out;
  const std::map<std::string, std::string> uuid_of = {{"0", "GPU-d7a00000-0000-4000-8000-000000000000"},
                                                      {"1", "GPU-d7a00000-0000-4000-8000-000000000001"},
                                                      {"2", "GPU-d7a00000-0000-4000-8000-000000000002"}};
  for (const std::string pod : {"dra-online", "dra-offline", "dra-whole-by-resource"}) {
    ASSERT_TRUE(Running(pod)) << pod << ": " << Api().GetPod("default", pod)->dump();
    const json claim = ClaimOf(pod);
    ASSERT_TRUE(claim.is_object()) << pod;
    const json& result = claim["status"]["allocation"]["devices"]["results"][0];
    const auto device = mgpu::dra::ParseDeviceName(result["device"].get<std::string>());
    ASSERT_TRUE(device) << result.dump();
    const auto env = Printed(pod, "MGPU_VISIBLE_CARDS");
    SCOPED_TRACE(pod);
    EXPECT_EQ(env.at("MGPU_VISIBLE_CARDS"), uuid_of.at(std::to_string(device->card_index)));
    if (pod == "dra-online") {
      EXPECT_EQ(env.at("MGPU_CORE_PERCENT"), "30");
      EXPECT_EQ(env.at("MGPU_MEMORY_MIB"), "4096");
      EXPECT_EQ(env.at("MGPU_QOS_LEVEL"), "online");
      EXPECT_EQ(env.at("MGPU_COMPUTE_POLICY"), "fixed-share");
    } else if (pod == "dra-offline") {
      EXPECT_EQ(env.at("MGPU_RECLAIMED_CORE_PERCENT"), "40");
      EXPECT_EQ(env.at("MGPU_MEMORY_MIB"), "2048");
      EXPECT_EQ(env.at("MGPU_QOS_LEVEL"), "offline");
      EXPECT_EQ(env.at("MGPU_COMPUTE_POLICY"), "guaranteed-burst-share");
    } else {
      EXPECT_EQ(device->variant, mgpu::dra::Variant::kWhole);
      EXPECT_EQ(env.at("MGPU_CORE_PERCENT"), "100");
      EXPECT_EQ(env.at("MGPU_MEMORY_MIB"), std::to_string(kCardMiB));
    }
    EXPECT_EQ(env.at("MGPU_CONTAINER_TOKEN"), claim["metadata"]["uid"]) << "one claim, one memory budget";
  }
  // Three claims, three cards: the policies and the whole card keep to cards of their own.
  std::set<std::string> cards;
  for (const std::string pod : {"dra-online", "dra-offline", "dra-whole-by-resource"})
    cards.insert(Printed(pod, "MGPU_VISIBLE_CARDS").at("MGPU_VISIBLE_CARDS"));
  EXPECT_EQ(cards.size(), 3u);
}

// Inside the container: the guard the claim's CDI spec mounted and preloads, capping memory at the claim's
// consumed memory over the fake driver. The pod is written as /mutate leaves one (docs/dra.md §7): its mgpu
// limits in D/dra-limits and one D/dra-gpu, which no node has: kube-scheduler routes it through the
// extender's choose and bind, the extender counts its claim on the card the daemon's D/gpu-dra-inventory
// names, and the kubelet admits it all the same.
TEST_F(DraKubelet, TheGuardIsInTheContainer) {
  ASSERT_TRUE(
      Api()
          .Create(kube::kResourceClaimTemplates, "default", ClaimTemplate("guarded-20-2g", "20", "2Gi"))
          .ok());
  json pod = Pod("guarded", "guarded-20-2g",
                 "env | grep ^MGPU_ | sort; echo preload=$(cat /etc/ld.so.preload); "
                 "export FAKE_CUDA_UUIDS=$MGPU_VISIBLE_CARDS MGPU_GUARD_LOG=1; "
                 "mgpu-guard-probe alloc 1 alloc $((MGPU_MEMORY_MIB + 1)) 2>&1 | sed 's/^/probe /'; "
                 "echo done; exec sleep 3600");
  const ResourceNames names = Config().Names();
  pod["spec"]["containers"][0]["resources"]["limits"] = {{names.dra_resource, "1"}};
  pod["metadata"]["annotations"][names.dra_limits] =
      json({{"c", {{names.core, "20"}, {names.memory, "2048"}}}}).dump();
  ASSERT_TRUE(Api().Create(kube::kPods, "default", pod).ok());
  ASSERT_TRUE(Running("guarded"));
  const std::string port = cluster_->Env("MGPU_CLUSTER_EXTENDER_PORT");
  EXPECT_TRUE(Poll(
      [&] {
        const json view = json::parse(Sh("curl -sfk https://127.0.0.1:" + port + "/v1/nodes").out, nullptr, false);
        if (!view.is_object()) return false;
        for (const json& n : view.value("nodes", json::array()))
          for (const json& c : n.value("cards", json::array()))
            if (c.value("core", 0) >= 20 && c.value("memoryMiB", 0) >= 2048) return true;
        return false;
      },
      kWait))
      << "the extender does not count the claim: " << Sh("curl -sk https://127.0.0.1:" + port + "/v1/nodes").out;
  const auto printed = Printed("guarded", "\ndone");
  EXPECT_EQ(printed.at("preload"), cluster_->state() + "/mgpu/lib/libmgpu-guard.so");
  EXPECT_EQ(printed.at("MGPU_MEMORY_MIB"), "2048");
  EXPECT_TRUE(printed.count("probe alloc 0")) << "1 MiB fits the cap";
  EXPECT_TRUE(printed.count("probe alloc 2")) << "MGPU_MEMORY_MIB + 1 is CUDA_ERROR_OUT_OF_MEMORY";
}

// The daemon killed (SIGKILL) and started again, then the kubelet restarted: running pods keep running, the
// kubelet's deletion of the node's slices is undone at a higher pool generation, a new pod is prepared, and a
// deleted pod's claim is unprepared (its CDI spec removed).
TEST_F(DraKubelet, RestartsOfTheDaemonAndTheKubeletLoseNothing) {
  ASSERT_TRUE(Poll([] { return PoolGeneration() > 0; }, kWait));
  ASSERT_TRUE(
      Api().Create(kube::kResourceClaimTemplates, "default", ClaimTemplate("small-10-1g", "10", "1Gi")).ok());
  const std::string sleeper = "env | grep ^MGPU_ | sort; echo done; exec sleep 3600";
  ASSERT_TRUE(Api().Create(kube::kPods, "default", Pod("before", "small-10-1g", sleeper)).ok());
  ASSERT_TRUE(Running("before"));

  const int registrations = Registrations();
  daemon_->Stop(SIGKILL);
  StartDaemon();
  // Until the kubelet has the new instance's registration it calls the killed one: a pod created in that
  // window fails its prepare, and the kubelet retries the pod only after its own back-off (79 s in one run).
  ASSERT_TRUE(Poll([&] { return Registrations() > registrations; }, kWait));
  ASSERT_TRUE(Api().Create(kube::kPods, "default", Pod("after-daemon", "small-10-1g", sleeper)).ok());
  ASSERT_TRUE(Running("after-daemon"));

  const int64_t generation = PoolGeneration();
  ASSERT_EQ(Sh(cluster_->Script("restart") + " kubelet --signal TERM").rc, 0);
  ASSERT_TRUE(Poll([&] { return PoolGeneration() > generation; }, kWait))
      << "the slices the kubelet deleted at its start were not published again";
  ASSERT_TRUE(Api().Create(kube::kPods, "default", Pod("after-kubelet", "small-10-1g", sleeper)).ok());
  ASSERT_TRUE(Running("after-kubelet"));
  EXPECT_EQ(Printed("before", "done").at("MGPU_CORE_PERCENT"), "10");
  kube::ApiResult before = Api().GetPod("default", "before");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ((*before)["status"]["phase"], "Running");

  // Deleting a pod unprepares its claim: the CDI spec goes.
  const std::string uid = ClaimOf("after-kubelet")["metadata"]["uid"];
  Config config;
  config.dra.cdi_directory = cluster_->state() + "/cdi";
  const std::string spec = mgpu::dra::CdiSpecPath(uid, config);
  ASSERT_TRUE(std::filesystem::exists(spec));
  ASSERT_EQ(Sh(cluster_->kubectl() + " delete pod -n default after-kubelet --wait=true --timeout=60s").rc, 0);
  EXPECT_TRUE(Poll([&] { return !std::filesystem::exists(spec); }, kWait)) << spec;
}

}  // namespace
}  // namespace mgpu::testing::dra
