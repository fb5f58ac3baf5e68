// mgpu's DRA mode on the real kubelet v1.36.2 with containerd v2.3.4 (scripts/cluster.sh with its kubelet
// node `localhost`): the node daemon runs on this machine as `mgpu-device-plugin --mode dra` over static
// cards (the node has no GPU), registers through the kubelet's plugin watcher, publishes the node's slices
// and prepares the claims kube-scheduler allocated; containerd applies the CDI specs. The containers print
// what they were handed: the environment of their claim's allocation and the guard (libmgpu-guard.so
// preloaded, capping memory over the fake driver of the test image). Then the daemon and the kubelet restart
// under running pods, the daemon is replaced the way a DaemonSet's rolling update with maxSurge 1 replaces it
// while pods keep arriving, and the only instance is killed under an arriving pod. Each instance runs as the
// DaemonSet's pod would (deploy/dra/daemonset.yaml): with an --instance-id of its own (a pod UID) and a ready
// file for the readiness probe. Skipped without the Kubernetes binaries; takes the machine's one kubelet.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <set>
#include <thread>

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
    daemon_ = StartDaemon(NewInstanceId());
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

  // A pod UID, as the DaemonSet's downward API gives each pod; a new one each call.
  static std::string NewInstanceId() {
    static int next = 0;
    char id[40];
    std::snprintf(id, sizeof id, "0b0a0000-0000-4000-8000-%012x", ++next);
    instance_ = id;
    return id;
  }
  static std::string ReadyFile(const std::string& id) { return cluster_->state() + "/dra-" + id + ".ready"; }

  // The node daemon as the DaemonSet's pod `id` runs it.
  static std::unique_ptr<Background> StartDaemon(const std::string& id) {
    const std::string state = cluster_->state();
    return std::make_unique<Background>(
        std::vector<std::string>{kBuild + "/src/node/mgpu-device-plugin", "--config",
                                 state + "/dra-daemon.yaml", "--kubeconfig", state + "/kubeconfig",
                                 "--node-name", "localhost", "--instance-id", id, "--ready-file",
                                 ReadyFile(id)},
        state + "/logs/dra-daemon.log");
  }

  // The node's slices: name -> uid and resourceVersion (a slice deleted and made again has a new uid).
  static std::map<std::string, std::string> SliceVersions() {
    std::map<std::string, std::string> out;
    kube::ApiResult slices =
        Api().List(kube::kResourceSlices, "", {.field_selector = "spec.nodeName=localhost"});
    if (!slices.ok()) return out;
    for (const json& s : (*slices)["items"])
      out[s["metadata"]["name"]] = s["metadata"].value("uid", "") + "/" + s["metadata"].value("resourceVersion", "");
    return out;
  }

  // The kubelet's FailedPrepareDynamicResources events, by pod.
  static std::map<std::string, int> FailedPrepares() {
    std::map<std::string, int> out;
    const Output events = Sh(cluster_->kubectl() +
                             " get events -n default --field-selector reason=FailedPrepareDynamicResources -o json");
    const json list = json::parse(events.out, nullptr, false);
    if (!list.is_object()) return out;
    for (const json& e : list.value("items", json::array()))
      out[e["involvedObject"].value("name", "")] += e.value("count", 1);
    return out;
  }

  // Seconds from the pod's creation to its container's start (the API's timestamps, whole seconds).
  static int64_t SecondsToStart(const std::string& pod) {
    const Output out = Sh(cluster_->kubectl() + " get pod -n default " + pod +
                          " -o jsonpath='{.metadata.creationTimestamp} {.status.containerStatuses[0].state.running.startedAt}'");
    std::istringstream in(out.out);
    std::string created, started;
    in >> created >> started;
    const auto seconds = [](const std::string& t) {
      std::tm tm{};
      if (!strptime(t.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return int64_t{-1};
      return static_cast<int64_t>(timegm(&tm));
    };
    return started.empty() ? -1 : seconds(started) - seconds(created);
  }

  // The cores and memory (MiB) the node's allocated claims consume on each card.
  static std::map<int, mgpu::dra::Consumed> ConsumedByCard() {
    std::map<int, mgpu::dra::Consumed> out;
    kube::ApiResult claims = Api().List(kube::kResourceClaims, "default", {});
    if (!claims.ok()) return out;
    for (const json& c : (*claims)["items"]) {
      auto facts = mgpu::dra::ReadClaim(c, Config());
      if (!facts.ok() || !*facts) continue;
      for (const mgpu::dra::AllocatedDevice& d : (*facts)->devices) {
        out[d.device.card_index].cores += d.consumed.cores + d.consumed.reclaimed_cores;
        out[d.device.card_index].memory_mib += d.consumed.memory_mib;
      }
    }
    return out;
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
  static inline std::string instance_;  // daemon_'s id
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
  daemon_ = StartDaemon(NewInstanceId());  // the DaemonSet's new pod
  // Until the kubelet has the new instance's registration it calls the killed one: a pod created in that
  // window fails its prepare, and the kubelet retries the pod only after its own back-off (measured by
  // AKilledOnlyInstanceDelaysAnArrivingPodByTheKubeletsBackOff).
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

// The DaemonSet's rolling update (maxSurge 1, maxUnavailable 0; deploy/dra/daemonset.yaml) while pods keep
// arriving, one a second: the new instance starts beside the old one, the kubelet registers it (its ready
// file appears: the readiness probe passes), only then is the old one sent SIGTERM, and pods keep arriving
// after. Every pod runs without one failed prepare (so without the kubelet's back-off), the slices are not
// written at all (same uid, same resourceVersion), and no card holds more than its capacity.
TEST_F(DraKubelet, ARollingUpdateDelaysNoArrivingPod) {
  ASSERT_TRUE(Poll([] { return PoolGeneration() > 0; }, kWait));
  ASSERT_EQ(Sh(cluster_->kubectl() + " delete pods --all -n default --wait=true --timeout=180s").rc, 0);
  ASSERT_TRUE(
      Api().Create(kube::kResourceClaimTemplates, "default", ClaimTemplate("roll-10-1g", "10", "1Gi")).ok());
  ASSERT_TRUE(Poll([] { return std::filesystem::exists(ReadyFile(instance_)); }, kWait));
  const auto slices = SliceVersions();
  const int64_t generation = PoolGeneration();
  ASSERT_FALSE(slices.empty());

  auto config = kube::ResolveClusterConfig(cluster_->state() + "/kubeconfig");
  ASSERT_TRUE(config.ok());
  auto client = kube::Client::Create(*config, {.request_timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(client.ok());
  constexpr int kMaxPods = 24;  // 240 cores of the 3 cards' 300
  std::atomic<int> created{0};
  std::atomic<bool> enough{false};
  std::string create_error;
  std::thread arrivals([&] {
    const std::string sleeper = "echo done; exec sleep 3600";
    while (created < kMaxPods && !(enough && created >= 4)) {
      kube::ApiResult r = (*client)->Create(kube::kPods, "default",
                                            Pod("roll-" + std::to_string(created.load()), "roll-10-1g", sleeper));
      if (!r.ok()) {
        create_error = r.message();
        return;
      }
      ++created;
      std::this_thread::sleep_for(1s);  // the pace of arrivals
    }
  });
  const auto at_least = [&](int n) { return Poll([&] { return created >= n || !create_error.empty(); }, kWait); };
  ASSERT_TRUE(at_least(2));
  const std::string old_id = instance_;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Background> surge = StartDaemon(NewInstanceId());
  ASSERT_TRUE(Poll([&] { return std::filesystem::exists(ReadyFile(instance_)); }, kWait))
      << "the new instance was not registered";
  const double ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int before_both = created;
  at_least(before_both + 3);  // pods arriving while both instances serve
  const int while_both = created - before_both;
  EXPECT_TRUE(daemon_->Stop(SIGTERM)) << "the old instance did not end cleanly on SIGTERM";
  EXPECT_FALSE(std::filesystem::exists(ReadyFile(old_id)));
  daemon_ = std::move(surge);
  const int after_stop = created;
  at_least(after_stop + 3);
  enough = true;
  arrivals.join();
  ASSERT_EQ(create_error, "");

  std::vector<int64_t> waits;
  for (int i = 0; i < created; ++i) {
    const std::string pod = "roll-" + std::to_string(i);
    ASSERT_TRUE(Running(pod)) << pod << ": " << Api().GetPod("default", pod)->dump();
    waits.push_back(SecondsToStart(pod));
  }
  const auto failed = FailedPrepares();
  for (int i = 0; i < created; ++i)
    EXPECT_EQ(failed.count("roll-" + std::to_string(i)), 0u) << "roll-" << i << " had a failed prepare";
  EXPECT_EQ(SliceVersions(), slices) << "a slice was deleted, re-created or rewritten during the update";
  EXPECT_EQ(PoolGeneration(), generation);
  for (const auto& [card, used] : ConsumedByCard()) {
    EXPECT_LE(used.cores, 100) << "card " << card;
    EXPECT_LE(used.memory_mib, kCardMiB) << "card " << card;
  }
  std::cout << "rolling update: " << created << " pods, one a second (" << before_both
            << " before the new instance was ready, " << while_both << " while both served, " << created - after_stop
            << " after the old one's SIGTERM); new instance registered " << ready_s
            << " s after its start; failed prepares 0; seconds from creation to container start: max "
            << *std::max_element(waits.begin(), waits.end()) << ", all:";
  for (int64_t w : waits) std::cout << ' ' << w;
  std::cout << std::endl;
}

// The only instance killed (SIGKILL: no SIGTERM, its sockets left behind) and a pod arriving before its
// replacement (the same pod's container, restarted by the kubelet: same instance id) is registered: the pod's
// prepare fails, and it runs only after the kubelet's back-off. Measured and printed, not bounded: the delay
// is the kubelet's.
TEST_F(DraKubelet, AKilledOnlyInstanceDelaysAnArrivingPodByTheKubeletsBackOff) {
  ASSERT_TRUE(Poll([] { return PoolGeneration() > 0; }, kWait));
  ASSERT_TRUE(Poll([] { return std::filesystem::exists(ReadyFile(instance_)); }, kWait));
  (void)Api().Create(kube::kResourceClaimTemplates, "default", ClaimTemplate("roll-10-1g", "10", "1Gi"));
  daemon_->Stop(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Api().Create(kube::kPods, "default", Pod("killed-0", "roll-10-1g", "echo done; exec sleep 3600")).ok());
  // The container is down until the kubelet restarts it; the pod reaches the node meanwhile.
  ASSERT_TRUE(Poll([] { return FailedPrepares().count("killed-0") > 0; }, kWait))
      << "the pod's prepare did not fail while the daemon was down";
  const double failed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  daemon_ = StartDaemon(instance_);
  ASSERT_TRUE(Poll([] { return std::filesystem::exists(ReadyFile(instance_)); }, kWait));
  const auto registered = std::chrono::steady_clock::now();
  ASSERT_TRUE(Poll([] {
    kube::ApiResult p = Api().GetPod("default", "killed-0");
    return p.ok() && p->value("status", json::object()).value("phase", "") == "Running";
  }, kWait));
  const double after_registration =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - registered).count();
  std::cout << "SIGKILL of the only instance: the arriving pod's prepare failed " << failed_s
            << " s after the kill; the restarted instance was registered "
            << std::chrono::duration<double>(registered - killed).count() << " s after the kill; the pod ran "
            << after_registration << " s after that (seconds from creation to container start: "
            << SecondsToStart("killed-0") << ", failed prepares " << FailedPrepares()["killed-0"] << ")"
            << std::endl;
}

}  // namespace
}  // namespace mgpu::testing::dra
