// mgpu end to end on a real cluster (issue 28): scripts/cluster.sh brings up kube-apiserver, etcd,
// kube-controller-manager, kube-scheduler (with deploy/'s extender configuration) and a kubelet with
// containerd on loopback, and `cluster.sh deploy` installs mgpu as an operator does (images, `kubectl apply
// -k` of deploy/overlays/static-test-node, scripts/certs.sh --apply). The tests then create pods through the
// real API server and read what the real components made of them: where kube-scheduler put each pod, the
// cards the extender assigned and the device plugin handed out (D/gpu-allocated where they differ), and what
// each container itself printed of its environment and of the guard. Every test ends by checking that no
// card is over-committed and every running mgpu container's environment matches the cards its pod holds.
// One cluster serves the whole suite (bringing it up takes about a minute); the tests use the namespace
// default and delete their pods. Skipped, and ctest says so, without the Kubernetes binaries.
// The seed scenarios run with their images replaced by the test workload image, once with their resource
// domain replaced by mgpu.io's and once unchanged under resourceDomain: vke.volcengine.com.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <fstream>
#include <sstream>
#include <tuple>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "common/config.h"
#include "common/file.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/yaml_json.h"
#include "testing/test_env.h"

namespace mgpu::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kRepo = MGPU_SOURCE_DIR;
const std::string kSeeds = std::string(MGPU_FIXTURES_DIR) + "/seed-scenarios/";
const ResourceNames kNames = Config().Names();
constexpr auto kWait = 120s;
constexpr int64_t kCardMemoryMiB = 24576;  // deploy/overlays/static-test-node/inventory.yaml

struct Output {
  int rc = 0;
  std::string out;
};

// Runs a shell command; its stdout and stderr together.
Output Shell(const std::string& command) {
  Output run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {127, "popen failed"};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return run;
}

class RealCluster : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("MGPU_REALCLUSTER_DIR");
    const char* base = std::getenv("MGPU_REALCLUSTER_PORT_BASE");
    state_ = dir && *dir ? dir : "/tmp/mgpu-realcluster";
    cluster_ = "bash " + kRepo + "/scripts/cluster.sh";
    options_ = " --state-dir " + state_ + " --port-base " + (base && *base ? base : "26400");
    fs::create_directories(state_);
    const Output binaries = Shell(cluster_ + " binaries" + options_);
    if (binaries.rc == 3) {
      skip_ = binaries.out;
      return;
    }
    const Output up = Shell(cluster_ + " up" + options_ + " && " + cluster_ + " deploy" + options_);
    if (up.rc != 0) {
      failure_ = "the cluster did not come up with mgpu deployed:\n" + up.out + Logs();
      return;
    }
    const std::string bin = Trimmed(binaries.out);
    kubectl_ = bin.substr(bin.rfind('\n') + 1) + "/kubectl --kubeconfig " + state_ + "/kubeconfig";
    Result<kube::ClusterConfig> config = kube::ResolveClusterConfig(state_ + "/kubeconfig");
    if (!config.ok()) {
      failure_ = config.message();
      return;
    }
    auto client = kube::Client::Create(*config);
    if (!client.ok()) {
      failure_ = client.message();
      return;
    }
    client_ = std::move(*client);
  }

  static void TearDownTestSuite() {
    client_.reset();
    if (skip_.empty()) Shell(cluster_ + " down" + options_);
  }

 protected:
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << "skipped: no Kubernetes binaries (" << skip_ << ")";
    ASSERT_TRUE(failure_.empty()) << failure_;
  }

  // Deletes the test's pods and workloads, and checks what every test must leave true.
  void TearDown() override {
    if (!skip_.empty() || !failure_.empty()) return;
    ExpectConsistent();
    if (HasFailure()) std::cerr << Logs();
    Shell(kubectl_ +
          " delete deployments,pods --all -n default --grace-period=0 --force --wait=true --timeout=60s");
  }

  static std::string Trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  static std::string Logs() { return Shell(cluster_ + " logs --lines 40" + options_).out; }

  // An mgpu pod whose container prints its environment, then what the guard does with a 1 MiB and a
  // too-large allocation and one launch over the test's fake driver, then sleeps.
  static json MgpuPod(const std::string& name, int core, int64_t memory_mib,
                      json annotations = json::object(), bool offline = false) {
    json limits = {{offline ? kNames.reclaimed_core : kNames.core, std::to_string(core)},
                   {kNames.memory, std::to_string(memory_mib)}};
    if (offline) annotations["katalyst.kubewharf.io/qos_level"] = "reclaimed_cores";
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", annotations}}},
            {"spec", {{"terminationGracePeriodSeconds", 1}, {"containers", {Workload("c", limits)}}}}};
  }

  static json Workload(const std::string& name, const json& limits) {
    return {{"name", name},
            {"image", "localhost/workload:mgpu"},
            {"imagePullPolicy", "Never"},
            {"command",
             {"/bin/sh", "-c",
              "env | sort | sed 's/^/env /'; echo preload $(cat /etc/ld.so.preload); "
              "test -f \"$(cat /etc/ld.so.preload)\" && echo library present; "
              "export FAKE_CUDA_UUIDS=$MGPU_VISIBLE_CARDS MGPU_GUARD_LOG=1; "
              "mgpu-guard-probe alloc 1 alloc $((MGPU_MEMORY_MIB + 1)) launch 1 2>&1 | sed 's/^/probe /'; "
              "echo done; exec sleep 3600"}},
            {"resources", {{"limits", limits}}}};
  }

  static kube::ApiResult Create(const json& object) {
    const std::string kind = object.value("kind", "");
    const kube::ApiResource& resource = kind == "Deployment" ? kube::kDeployments : kube::kPods;
    return client_->Create(resource, "default", object);
  }

  static json Pod(const std::string& name) {
    kube::ApiResult pod = client_->GetPod("default", name);
    return pod.ok() ? pod.value() : json();
  }

  // The cards a running pod holds: its gpu-allocated, else its gpu-assignment (the plugin writes
  // gpu-allocated only where the kubelet's devices differ from the assignment).
  static std::optional<Assignment> Held(const json& pod) {
    if (pod["status"].value("phase", "") != "Running") return std::nullopt;
    const json annotations = pod["metadata"].value("annotations", json::object());
    for (const std::string& name : {names_.gpu_allocated, names_.gpu_assignment}) {
      if (!annotations.contains(name)) continue;
      Result<Assignment> a = DecodeAssignment(annotations[name].get<std::string>());
      return a.ok() ? std::optional<Assignment>(*a) : std::nullopt;
    }
    return std::nullopt;
  }

  // The cards of every container of `held`, as MGPU_VISIBLE_CARDS lists them.
  static std::string VisibleCards(const Assignment& held) {
    std::string uuids;
    for (const ContainerAssignment& c : held.containers)
      for (const CardShare& s : c.cards) uuids += (uuids.empty() ? "" : ",") + s.uuid;
    return uuids;
  }

  // The lines the pod's container printed, once it has printed "done".
  static std::vector<std::string> Printed(const std::string& pod) {
    std::vector<std::string> lines;
    WaitUntil(
        [&] {
          const Output logs = Shell(kubectl_ + " logs -n default " + pod);
          if (logs.rc != 0 || logs.out.find("\ndone\n") == std::string::npos) return false;
          std::istringstream in(logs.out);
          lines.clear();
          for (std::string line; std::getline(in, line);) lines.push_back(line);
          return true;
        },
        kWait);
    return lines;
  }

  static std::map<std::string, std::string> PrintedEnv(const std::string& pod) {
    std::map<std::string, std::string> env;
    for (const std::string& line : Printed(pod)) {
      if (line.rfind("env ", 0) != 0) continue;
      const size_t eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(4, eq - 4)] = line.substr(eq + 1);
    }
    return env;
  }

  // Waits until every named pod is Running holding its cards.
  static ::testing::AssertionResult RunningAndHolding(const std::vector<std::string>& pods) {
    for (const std::string& name : pods) {
      if (!WaitUntil([&] { return Held(Pod(name)).has_value(); }, kWait))
        return ::testing::AssertionFailure() << name << " is not Running holding cards: " << Pod(name).dump();
    }
    return ::testing::AssertionSuccess();
  }

  // No card over-committed; every running mgpu container printed the environment of the cards its pod holds
  // (once the plugin's gpu-allocated, where it writes one, has come: until then the pod shows its
  // assignment).
  void ExpectConsistent() {
    kube::ApiResult pods = client_->ListPods("default");
    ASSERT_TRUE(pods.ok()) << pods.message();
    std::map<std::string, CardUsage> cards;
    for (const json& pod : pods->value("items", json::array())) {
      const std::string name = pod["metadata"].value("name", "");
      if (pod["status"].value("phase", "") != "Running") continue;
      if (!pod["metadata"].value("annotations", json::object()).contains(names_.gpu_assignment)) continue;
      const std::map<std::string, std::string> env = PrintedEnv(name);
      const std::string visible = env.count("MGPU_VISIBLE_CARDS") ? env.at("MGPU_VISIBLE_CARDS") : "";
      std::optional<Assignment> allocated;
      WaitUntil(
          [&] {
            allocated = Held(Pod(name));
            return allocated && VisibleCards(*allocated) == visible;
          },
          kWait);
      ASSERT_TRUE(allocated) << name << " runs holding no cards";
      for (const ContainerAssignment& c : allocated->containers) {
        std::string uuids;
        for (const CardShare& s : c.cards) {
          uuids += (uuids.empty() ? "" : ",") + s.uuid;
          CardUsage& u = cards[s.uuid];
          u.core += s.core;
          u.reclaimed_core += s.reclaimed_core;
          u.memory_mib += s.memory_mib;
          EXPECT_EQ(env.count("MGPU_MEMORY_MIB") ? env.at("MGPU_MEMORY_MIB") : "",
                    std::to_string(s.memory_mib))
              << name;
          const char* core_key = s.core > 0 ? "MGPU_CORE_PERCENT" : "MGPU_RECLAIMED_CORE_PERCENT";
          EXPECT_EQ(env.count(core_key) ? env.at(core_key) : "",
                    std::to_string(s.core > 0 ? s.core : s.reclaimed_core))
              << name;
        }
        EXPECT_EQ(env.count("MGPU_VISIBLE_CARDS") ? env.at("MGPU_VISIBLE_CARDS") : "", uuids)
            << name << " container " << c.container;
      }
    }
    for (const auto& [uuid, u] : cards) {
      EXPECT_LE(u.core, 100) << uuid;
      EXPECT_LE(u.reclaimed_core, 100) << uuid;
      EXPECT_LE(u.memory_mib, kCardMemoryMiB) << uuid;
    }
  }

  // The seed scenario `file` with the workload image for the images and, unless `volcengine`, mgpu.io for
  // vke.volcengine.com (the daemons' resourceDomain while the suite runs, but for the test that sets it).
  static std::vector<json> Seed(const std::string& file, bool volcengine = false) {
    Result<std::string> text = ReadFile(kSeeds + file);
    EXPECT_TRUE(text.ok()) << text.message();
    std::string yaml = text.ok() ? *text : "";
    for (size_t at; !volcengine && (at = yaml.find("vke.volcengine.com")) != std::string::npos;)
      yaml.replace(at, 18, "mgpu.io");
    Result<std::vector<json>> docs = YamlDocumentsToJson(yaml);
    EXPECT_TRUE(docs.ok()) << docs.message();
    std::vector<json> out;
    for (json doc : docs.ok() ? *docs : std::vector<json>()) {
      json& spec = doc["kind"] == "Deployment" ? doc["spec"]["template"]["spec"] : doc["spec"];
      spec["terminationGracePeriodSeconds"] = 1;
      for (json& c : spec["containers"]) c = Workload(c["name"], c["resources"]["limits"]);
      out.push_back(doc);
    }
    return out;
  }

  // How often the kubelet restarted the device plugin's container.
  static int PluginRestarts() {
    kube::ApiResult pods = client_->ListPods("mgpu-system", {"app.kubernetes.io/name=mgpu-device-plugin"});
    int restarts = 0;
    for (const json& pod : pods.ok() ? pods->value("items", json::array()) : json::array())
      for (const json& c : pod["status"].value("containerStatuses", json::array()))
        restarts += c.value("restartCount", 0);
    return restarts;
  }

  // The plugin's container is ready and the plugin says (its /metrics) that the kubelet took its three
  // registrations.
  static bool PluginServes() {
    kube::ApiResult pods = client_->ListPods("mgpu-system", {"app.kubernetes.io/name=mgpu-device-plugin"});
    bool ready = false;
    for (const json& pod : pods.ok() ? pods->value("items", json::array()) : json::array())
      for (const json& c : pod["status"].value("containerStatuses", json::array()))
        ready = c.value("ready", false);
    const Output metrics =
        Shell(". " + state_ + "/env && curl -s http://$MGPU_CLUSTER_NODE_IP:" +
              "$MGPU_CLUSTER_PLUGIN_METRICS_PORT/metrics | grep -c '^mgpu_plugin_registered{.*} 1'");
    return ready && Trimmed(metrics.out) == "1";
  }

  static std::vector<std::string> PodsOf(const std::string& app) {
    std::vector<std::string> names;
    kube::ApiResult pods = client_->ListPods("default", {"app=" + app});
    for (const json& pod : pods.ok() ? pods->value("items", json::array()) : json::array())
      names.push_back(pod["metadata"].value("name", ""));
    return names;
  }

  // Runs `command` through the cluster's environment file (KUBECONFIG, the ports, MGPU_K8S_BIN); the kubectl
  // of the cluster is `$K`.
  static Output InCluster(const std::string& command) {
    return Shell(". " + state_ + "/env && K=\"$MGPU_K8S_BIN/kubectl\" && " + command);
  }

  // Changes one line of the daemons' config.yaml in the ConfigMap mgpu-config (the operator's edit of
  // deploy/base/config.yaml), then restarts the extender and, with `plugin`, the device plugin, and waits
  // until both serve again.
  static ::testing::AssertionResult ChangeConfig(const std::string& from, const std::string& to,
                                                 bool plugin) {
    return ChangeConfig({{from, to}}, plugin);
  }
  // The same for several lines at once, and with `inventory` the node's cards as well (the ConfigMap
  // mgpu-static-inventory, which the restarted device plugin reads).
  static ::testing::AssertionResult ChangeConfig(const std::vector<std::pair<std::string, std::string>>& edits,
                                                 bool plugin, const std::string& inventory = "") {
    std::string check = "true", sed = "sed";
    for (const auto& [from, to] : edits) {
      check += " && grep -q '" + from + "' $f";
      sed += " -e 's|" + from + "|" + to + "|'";
    }
    const Output replaced =
        InCluster("f=$(mktemp) && $K -n mgpu-system get configmap mgpu-config -o yaml > $f && " + check +
                  " && " + sed + " $f | $K replace -f -; rc=$?; rm -f $f; exit $rc");
    if (replaced.rc != 0)
      return ::testing::AssertionFailure() << "mgpu-config lacks a line of the edits: " << replaced.out;
    if (!inventory.empty()) {
      const std::string patch = state_ + "/inventory-patch.json";
      std::ofstream(patch) << json{{"data", {{"inventory.yaml", inventory}}}}.dump();
      const Output patched =
          InCluster("$K -n mgpu-system patch configmap mgpu-static-inventory --type merge --patch-file " + patch);
      if (patched.rc != 0) return ::testing::AssertionFailure() << "the inventory: " << patched.out;
    }
    // One replica on the node's own port: the old extender goes before the new one comes.
    const Output restarted = InCluster(
        "$K -n mgpu-system scale deployment/mgpu-scheduler-extender --replicas 0 && "
        "$K -n mgpu-system wait --for=delete pod -l app.kubernetes.io/name=mgpu-scheduler-extender "
        "--timeout=120s && " +
        std::string(plugin ? "$K -n mgpu-system delete pod -l app.kubernetes.io/name=mgpu-device-plugin "
                             "--wait=true --timeout=120s && "
                           : "") +
        "$K -n mgpu-system scale deployment/mgpu-scheduler-extender --replicas 1 && "
        "$K -n mgpu-system rollout status deployment/mgpu-scheduler-extender --timeout=120s && "
        "$K -n mgpu-system rollout status daemonset/mgpu-device-plugin --timeout=120s");
    if (restarted.rc != 0)
      return ::testing::AssertionFailure() << "the daemons did not restart: " << restarted.out;
    if (plugin && !WaitUntil(PluginServes, kWait))
      return ::testing::AssertionFailure() << "the restarted plugin did not register";
    return ::testing::AssertionSuccess();
  }

  // The device plugin's process in its container, sent `signal` (STOP freezes it, CONT thaws it).
  static ::testing::AssertionResult SignalPlugin(const std::string& signal) {
    const Output sent = Shell(
        "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case \"$c\" in "
        "\"/mgpu-device-plugin --config\"*) kill -" +
        signal + " ${p#/proc/} && echo signalled;; esac; done");
    if (sent.out.find("signalled") == std::string::npos)
      return ::testing::AssertionFailure()
             << "no mgpu-device-plugin process to send SIG" << signal << ": " << sent.out;
    return ::testing::AssertionSuccess();
  }

  // The extender's own view of the node's cards (GET /v1/nodes on its HTTPS port).
  static json ExtenderNodes() {
    const Output got =
        InCluster("curl -sk https://$MGPU_CLUSTER_NODE_IP:$MGPU_CLUSTER_EXTENDER_PORT/v1/nodes");
    return json::parse(got.out, nullptr, false);
  }

  // The Volcengine seed scenarios (online-offline.yaml, emr-style.yaml), under the Volcengine names or
  // mgpu.io's: the four replicas of the two Deployments share one card (online 60, offline 60, 16 GiB, the
  // Deployments' compute policy), the EMR pod lands too, each container holds the cards its pod says (Held).
  void ExpectSeedScenariosLand(bool volcengine) {
    for (const char* file : {"online-offline.yaml", "emr-style.yaml"})
      for (const json& doc : Seed(file, volcengine)) {
        kube::ApiResult created = Create(doc);
        ASSERT_TRUE(created.ok()) << file << ": " << created.message();
      }
    ASSERT_TRUE(WaitUntil(
        [] { return PodsOf("infer-online").size() == 2 && PodsOf("train-offline").size() == 2; }, kWait));
    std::vector<std::string> pods = PodsOf("infer-online");
    for (const std::string& p : PodsOf("train-offline")) pods.push_back(p);
    pods.push_back("spark-executor-1");
    ASSERT_TRUE(RunningAndHolding(pods));
    std::map<std::string, CardUsage> cards;
    for (const std::string& name : pods) {
      if (name == "spark-executor-1") continue;
      const json pod = Pod(name);
      EXPECT_EQ(pod["spec"].value("nodeName", ""), "localhost");
      const std::optional<Assignment> allocated = Held(pod);
      ASSERT_TRUE(allocated) << name;
      for (const ContainerAssignment& c : allocated->containers)
        for (const CardShare& s : c.cards) {
          cards[s.uuid].core += s.core;
          cards[s.uuid].reclaimed_core += s.reclaimed_core;
          cards[s.uuid].memory_mib += s.memory_mib;
        }
    }
    ASSERT_EQ(cards.size(), 1u) << "the four replicas share one card";
    EXPECT_EQ(cards.begin()->second.core, 60);
    EXPECT_EQ(cards.begin()->second.reclaimed_core, 60);
    EXPECT_EQ(cards.begin()->second.memory_mib, 16384);
    EXPECT_EQ(PrintedEnv(PodsOf("train-offline").front())["MGPU_QOS_LEVEL"], "offline");
  }

  static inline std::string state_, cluster_, options_, kubectl_, skip_, failure_;
  static inline std::unique_ptr<kube::Client> client_;
  static inline ResourceNames names_ = kNames;  // the daemons' resource names now
};

// The Volcengine seed scenarios with their resource domain replaced by mgpu.io's (ExpectSeedScenariosLand).
TEST_F(RealCluster, SeedScenariosLandWhereExpected) { ExpectSeedScenariosLand(/*volcengine=*/false); }

// The Volcengine manifests, unchanged but for their images, on a real GPU server: a node of 8 static cards
// of 80 GiB, which needs memoryUnitMiB 16 (the kubelet's 4 MiB ListAndWatch limit), and the operator's one
// edit resourceDomain: vke.volcengine.com (deploy/'s scheduler configuration and webhooks already name
// vke.volcengine.com's resources). mgpu-memory: 4096 means 4096 MiB there too: the webhook stores it as 256
// devices, the four replicas share one card as the scenarios' README says (online 60, offline 60, 16384 MiB),
// each container is told and capped at 4096 MiB, kubectl mgpu shows MiB, and the bad requests are refused at
// creation with their sentences. Then the suite's node and names again.
TEST_F(RealCluster, VolcengineManifestsRunUnchangedOnEightCardsOf80GiB) {
  std::string cards = "cards:\n";
  for (int i = 0; i < 8; ++i)
    cards += "  - {index: " + std::to_string(i) + ", uuid: GPU-80e80e80-000" + std::to_string(i) +
             "-4e6f-9a1b-5d2c7e9f000" + std::to_string(i) +
             ", model: NVIDIA H100 80GB HBM3, memoryMiB: 81920, healthy: true}\n";
  const Result<std::string> suite_cards = ReadFile(kRepo + "/deploy/overlays/static-test-node/inventory.yaml");
  ASSERT_TRUE(suite_cards.ok()) << suite_cards.message();
  Config volcengine;
  volcengine.resource_domain = "vke.volcengine.com";
  // Whatever fails below, the rest of the suite gets its node and names back.
  struct Restore {
    std::string cards;
    ~Restore() {
      Shell(kubectl_ +
            " delete deployments,pods --all -n default --grace-period=0 --force --wait=true --timeout=60s");
      names_ = kNames;
      EXPECT_TRUE(ChangeConfig({{"resourceDomain: vke.volcengine.com", "resourceDomain: mgpu.io"},
                                {"memoryUnitMiB: 16", "memoryUnitMiB: 1"}},
                               /*plugin=*/true, cards));
    }
  } restore{*suite_cards};
  ASSERT_TRUE(ChangeConfig({{"resourceDomain: mgpu.io", "resourceDomain: vke.volcengine.com"},
                            {"memoryUnitMiB: 1$", "memoryUnitMiB: 16"}},
                           /*plugin=*/true, cards));
  names_ = volcengine.Names();
  ASSERT_TRUE(WaitUntil(
      [] {
        return Trimmed(Shell(kubectl_ + " get node localhost -o "
                                        "jsonpath='{.status.allocatable.vke\\.volcengine\\.com/mgpu-memory}'")
                           .out) == std::to_string(8 * 81920 / 16);
      },
      kWait))
      << "node localhost does not advertise 8 x 80 GiB of vke.volcengine.com/mgpu-memory in 16 MiB devices";

  ExpectSeedScenariosLand(/*volcengine=*/true);
  std::vector<std::string> replicas = PodsOf("infer-online");
  for (const std::string& p : PodsOf("train-offline")) replicas.push_back(p);
  for (const std::string& name : replicas) {
    const json pod = Pod(name);
    EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"][names_.memory], "256") << name;
    const json written = {{pod["spec"]["containers"][0]["name"].get<std::string>(), "4096"}};
    EXPECT_EQ(pod["metadata"]["annotations"].value(names_.memory_as_written, ""), written.dump()) << name;
    EXPECT_EQ(PrintedEnv(name)["MGPU_MEMORY_MIB"], "4096") << name;
    bool capped = false;
    for (const std::string& line : Printed(name))
      capped |= line.rfind("probe mgpu-guard pid=", 0) == 0 && line.find(": cap 4096 MiB per card") != std::string::npos;
    EXPECT_TRUE(capped) << name << ": " << ::testing::PrintToString(Printed(name));
  }
  // kubectl mgpu, as a user runs it: one card holding the four, in MiB. (The node still carries the
  // inventory the plugin published under mgpu.io before the change, so the domain is named.)
  const Output nodes = Shell("$MGPU_BUILD_DIR/src/cli/kubectl-mgpu nodes -o json --resource-domain "
                             "vke.volcengine.com --kubeconfig " + state_ + "/kubeconfig");
  ASSERT_EQ(nodes.rc, 0) << nodes.out;
  const json view = json::parse(nodes.out, nullptr, false);
  std::multiset<std::tuple<int, int, int>> used;  // core, reclaimed core, MiB of each card in use
  for (const json& card : view["nodes"][0]["cards"]) {
    EXPECT_EQ(card["capacityMiB"], 81920) << card;
    if (card.value("memoryMiB", 0) > 0)
      used.insert({card["core"].get<int>(), card["reclaimedCore"].get<int>(), card["memoryMiB"].get<int>()});
  }
  EXPECT_EQ(used, (std::multiset<std::tuple<int, int, int>>{{60, 60, 16384}, {30, 0, 4096}}))
      << "the four replicas on one card, the EMR pod (fixed-share) on another: " << nodes.out;

  int refused = 0;
  for (const json& pod : Seed("bad-requests.yaml", /*volcengine=*/true)) {
    const std::string name = pod["metadata"]["name"];
    kube::ApiResult created = Create(pod);
    ASSERT_FALSE(created.ok()) << name << " was admitted";
    EXPECT_NE(created.message().find("denied the request: pod default/" + name), std::string::npos)
        << created.message();
    ++refused;
  }
  EXPECT_EQ(refused, 8);

  ExpectConsistent();
}

// What the extender's bind relies on (issue 27), checked against kube-apiserver v1.36.2 itself: a Binding's
// metadata.annotations land on the pod in the same update as spec.nodeName (one watch event, one
// resourceVersion), so the cards travel with the bind in one call; a Binding whose uid or resourceVersion
// precondition fails, or for a pod already bound, changes nothing (409). The pods here are bound to a node
// that does not exist, so no kubelet runs them.
TEST_F(RealCluster, TheBindingCarriesTheCardsInOneUpdate) {
  const std::string assignment =
      EncodeAssignment(Assignment{{ContainerAssignment{"c", {CardShare{"GPU-nowhere-0", 20, 0, 1024}}}}});
  const std::map<std::string, std::string> cards = {{kNames.gpu_assignment, assignment},
                                                    {kNames.gpu_assume_time, EncodeAssumeTime(42)}};
  // No scheduler of this cluster takes these pods: the test binds them itself.
  const auto unscheduled = [](json pod) {
    pod["spec"]["schedulerName"] = "no-such-scheduler";
    return pod;
  };
  kube::ApiResult created =
      Create(unscheduled(MgpuPod("bound-with-cards", 20, 1024, {{"example.com/kept", "yes"}})));
  ASSERT_TRUE(created.ok()) << created.message();
  // The pod's uid and version, then every change to it from there.
  const std::string uid = kube::MetadataString(*created, "uid");
  std::vector<json> changes;
  kube::CancelToken cancel;
  std::thread watcher([&] {
    kube::WatchOptions options;
    options.selectors.field_selector = "metadata.name=bound-with-cards";
    options.resource_version = kube::MetadataString(*created, "resourceVersion");
    (void)client_->Watch(
        kube::kPods, "default", options,
        [&](const kube::WatchEvent& e) {
          const bool modified = e.type == "MODIFIED";
          if (modified) changes.push_back(e.object);
          return !(modified && !e.object["spec"].value("nodeName", "").empty());
        },
        &cancel);
  });
  // The Binding names the pod's uid, as kube-scheduler's own does; another uid is refused.
  kube::ApiResult wrong = client_->BindPod("default", "bound-with-cards", "not-its-uid", "nowhere", cards);
  EXPECT_EQ(wrong.http_status(), 409) << wrong.message();
  kube::ApiResult bound = client_->BindPod("default", "bound-with-cards", uid, "nowhere", cards);
  if (!bound.ok()) cancel.Cancel();
  watcher.join();
  ASSERT_TRUE(bound.ok()) << bound.message();
  ASSERT_FALSE(changes.empty());
  for (size_t i = 0; i + 1 < changes.size(); ++i)
    EXPECT_FALSE(changes[i]["metadata"].value("annotations", json::object()).contains(kNames.gpu_assignment))
        << "an update before the bind already had the cards: " << changes[i].dump();
  const json& update = changes.back();  // the bind's one update
  EXPECT_EQ(update["spec"]["nodeName"], "nowhere");
  EXPECT_EQ(update["metadata"]["annotations"][kNames.gpu_assignment], assignment);
  EXPECT_EQ(update["metadata"]["annotations"][kNames.gpu_assume_time], EncodeAssumeTime(42));
  EXPECT_EQ(update["metadata"]["annotations"]["example.com/kept"], "yes") << "the pod's own annotations stay";
  bool scheduled = false;
  for (const json& c : update["status"].value("conditions", json::array()))
    scheduled |= c.value("type", "") == "PodScheduled" && c.value("status", "") == "True";
  EXPECT_TRUE(scheduled) << update["status"].dump();
  // Bound already: refused, and the annotations are those of the first bind.
  std::map<std::string, std::string> other = cards;
  other[kNames.gpu_assignment] = "{}";
  EXPECT_EQ(client_->BindPod("default", "bound-with-cards", uid, "elsewhere", other).http_status(), 409);
  EXPECT_EQ(Pod("bound-with-cards")["metadata"]["annotations"][kNames.gpu_assignment], assignment);
  // A Binding conditional on a resourceVersion the pod has left: refused, nothing written.
  kube::ApiResult second = Create(unscheduled(MgpuPod("stale-binding", 20, 1024)));
  ASSERT_TRUE(second.ok()) << second.message();
  const std::string stale = kube::MetadataString(*second, "resourceVersion");
  ASSERT_TRUE(client_->PatchPodMetadata("default", "stale-binding", {.labels = {{"changed", "yes"}}}).ok());
  const json binding = {{"apiVersion", "v1"},
                        {"kind", "Binding"},
                        {"metadata",
                         {{"name", "stale-binding"},
                          {"namespace", "default"},
                          {"resourceVersion", stale},
                          {"annotations", cards}}},
                        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "nowhere"}}}};
  kube::ApiResult refused = client_->Create(
      kube::ApiResource{"/api/v1", "pods/stale-binding/binding", "Binding"}, "default", binding);
  EXPECT_EQ(refused.http_status(), 409) << refused.message();
  const json untouched = Pod("stale-binding");
  EXPECT_EQ(untouched["spec"].value("nodeName", ""), "");
  EXPECT_FALSE(untouched["metadata"].value("annotations", json::object()).contains(kNames.gpu_assignment));
}

// Invalid pods are refused at creation by the real API server calling the extender's webhook (its CEL
// matchConditions evaluated there), each with the sentence naming the pod and the rule; none is stored.
TEST_F(RealCluster, InvalidPodsAreRefusedAtCreationByTheWebhook) {
  int refused = 0;
  for (const json& pod : Seed("bad-requests.yaml")) {
    const std::string name = pod["metadata"]["name"];
    kube::ApiResult created = Create(pod);
    ASSERT_FALSE(created.ok()) << name << " was admitted";
    EXPECT_NE(created.message().find("denied the request"), std::string::npos) << created.message();
    EXPECT_NE(created.message().find(name), std::string::npos) << created.message();
    EXPECT_TRUE(client_->GetPod("default", name).IsNotFound()) << name;
    ++refused;
  }
  EXPECT_EQ(refused, 8);
  // A pod without mgpu resources is never sent (matchConditions) and runs.
  json plain = MgpuPod("plain", 0, 0);
  plain["spec"]["containers"][0].erase("resources");
  ASSERT_TRUE(Create(plain).ok());
}

// Inside a GPU container: the environment of the cards its pod holds (ExpectConsistent), the guard preloaded
// by /etc/ld.so.preload from the library the plugin installed, capping memory at MGPU_MEMORY_MIB (over the
// fake driver the image carries) and saying once, in one line, which cards it guards with what cap and share.
TEST_F(RealCluster, TheGuardIsInTheContainer) {
  ASSERT_TRUE(Create(MgpuPod("guarded", 20, 2048)).ok());
  ASSERT_TRUE(RunningAndHolding({"guarded"}));
  const std::vector<std::string> lines = Printed("guarded");
  const std::set<std::string> printed(lines.begin(), lines.end());
  EXPECT_TRUE(printed.count("preload " + state_ + "/mgpu/lib/libmgpu-guard.so"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(printed.count("library present"));
  EXPECT_TRUE(printed.count("probe alloc 0")) << "1 MiB fits the cap";
  EXPECT_TRUE(printed.count("probe alloc 2")) << "MGPU_MEMORY_MIB + 1 is CUDA_ERROR_OUT_OF_MEMORY";
  std::string token;
  for (const std::string& line : lines)
    if (line.rfind("env MGPU_CONTAINER_TOKEN=", 0) == 0) token = line.substr(line.find('=') + 1);
  ASSERT_FALSE(token.empty()) << ::testing::PrintToString(lines);
  const std::string guarding =
      ": guarding 1 card(s) for container token=" + token + ": cap 2048 MiB per card, share 20";
  int notices = 0;
  for (const std::string& line : lines)
    notices += line.rfind("probe mgpu-guard pid=", 0) == 0 && line.size() > guarding.size() &&
               line.compare(line.size() - guarding.size(), guarding.size(), guarding) == 0;
  EXPECT_EQ(notices, 1) << "one line, once: " << ::testing::PrintToString(lines);
}

// Look-alikes (identical shapes) created together, and an offline pod beside them: each gets cards of its
// own and prints the environment of exactly the cards its pod says it holds.
TEST_F(RealCluster, LookAlikesAndAnOfflinePod) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Create(MgpuPod("alike-" + std::to_string(i), 40, 4096)).ok());
  ASSERT_TRUE(Create(MgpuPod("offline", 50, 2048, json::object(), true)).ok());
  ASSERT_TRUE(RunningAndHolding({"alike-0", "alike-1", "alike-2", "alike-3", "offline"}));
  EXPECT_EQ(PrintedEnv("offline")["MGPU_QOS_LEVEL"], "offline");
  EXPECT_EQ(PrintedEnv("offline")["MGPU_RECLAIMED_CORE_PERCENT"], "50");
  // 4 x 40 on two cards of 100: two per card.
  std::map<std::string, int> per_card;
  for (int i = 0; i < 4; ++i)
    per_card[Held(Pod("alike-" + std::to_string(i)))->containers[0].cards[0].uuid]++;
  EXPECT_EQ(per_card.size(), 2u);
}

// A node's plugin down longer than assignmentTTLSeconds (3 s here): the plugin's process frozen (SIGSTOP:
// the kubelet's calls into it hang, as with a wedged plugin), pods bound meanwhile sit in admission
// unallocated past the TTL. (Short, because the DaemonSet's liveness probe restarts a plugin frozen for
// 20 to 30 s; the test checks it did not.) A bound, live pod keeps its cards however long the plugin takes
// (DESIGN §5.5), so the extender still counts them, a pod that would only fit on their cards is not placed
// (kube-scheduler's message says why, in its own sentence), and once the plugin runs again every pod gets
// exactly its cards.
TEST_F(RealCluster, APluginDownLongerThanTheAssignmentTtlDoubleBooksNothing) {
  ASSERT_TRUE(ChangeConfig("assignmentTTLSeconds: 300", "assignmentTTLSeconds: 3", /*plugin=*/false));
  const int restarts = PluginRestarts();
  ASSERT_TRUE(SignalPlugin("STOP"));
  // 3 x 40 percent on two cards of 100: 80 on one, 40 on the other.
  std::vector<std::string> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back("held-" + std::to_string(i));
    ASSERT_TRUE(Create(MgpuPod(held.back(), 40, 1024)).ok());
  }
  const auto core_in_view = [] {
    int core = 0;
    const json nodes = ExtenderNodes();
    for (const json& node : nodes.is_object() ? nodes.value("nodes", json::array()) : json::array())
      for (const json& card : node.value("cards", json::array())) core += card.value("core", 0);
    return core;
  };
  const bool bound = WaitUntil(
      [&] {
        for (const std::string& name : held)
          if (Pod(name)["spec"].value("nodeName", "").empty()) return false;
        return core_in_view() == 120;
      },
      kWait);
  // The scenario is time passing: the assignments grow older than the TTL while the plugin stays down.
  if (bound) std::this_thread::sleep_for(5s);
  const int core_after_ttl = core_in_view();
  kube::ApiResult late = bound ? Create(MgpuPod("late", 70, 1024)) : kube::ApiResult(json());
  std::string message;
  const bool refused = bound && late.ok() &&
                       WaitUntil(
                           [&] {
                             for (const json& c : Pod("late")["status"].value("conditions", json::array()))
                               if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False")
                                 message = c.value("message", "");
                             return !message.empty();
                           },
                           kWait);
  const std::string late_node = Pod("late")["spec"].value("nodeName", "");
  ASSERT_TRUE(SignalPlugin("CONT"));  // before any assertion can end the test
  ASSERT_TRUE(bound) << "the held pods were not all bound";
  EXPECT_EQ(PluginRestarts(), restarts)
      << "the liveness probe restarted the frozen plugin: the test took too long";
  EXPECT_EQ(core_after_ttl, 120) << "bound, unallocated pods keep their cards past the TTL";
  EXPECT_TRUE(refused) << "late was placed on cards the held pods have: " << late_node;
  EXPECT_NE(message.find("1 no mgpu card free for 70 percent core and 1024 MiB"), std::string::npos)
      << message;
  ASSERT_TRUE(RunningAndHolding(held));
  EXPECT_EQ(Pod("late")["spec"].value("nodeName", ""), "") << "no room for it";
  (void)client_->Delete(kube::kPods, "default", "late");
  ExpectConsistent();
  ASSERT_TRUE(ChangeConfig("assignmentTTLSeconds: 3", "assignmentTTLSeconds: 300", /*plugin=*/false));
}

// Each component killed (SIGKILL) and restarted while pods are being created: every pod created after the
// restart ends Running with its environment, so does every pod created just before it, except that a pod in
// admission when the plugin or the kubelet died may fail admission for good (UnexpectedAdmissionError: the
// kubelet's rule for a plugin gone mid-call, and a restarted kubelet admits pods before the plugin has
// registered again; README, Troubleshooting) and then holds no card; pods that ran keep running; no card is
// over-committed.
// CPU-only pods under the shipped scheduler configuration (issue 41): kube-scheduler asks the extender's
// second entry (choose-cpu-only, every pod, ignorable) where each goes, and while the extender is down it
// schedules them without it, the extender's own new pod included.
TEST_F(RealCluster, CpuOnlyPodsAskTheExtenderAndAreScheduledWithoutIt) {
  const auto asked = [] {
    const Output metrics = InCluster(
        "curl -sk https://$MGPU_CLUSTER_NODE_IP:$MGPU_CLUSTER_EXTENDER_PORT/metrics | "
        "awk '/^mgpu_extender_requests_total[{]verb=\"choose-cpu-only\",code=\"200\"[}]/ {n += $NF} "
        "END {print n + 0}'");
    return std::atoll(metrics.out.c_str());
  };
  const auto cpu_pod = [](const std::string& name) {
    return json{{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"terminationGracePeriodSeconds", 1},
                  {"containers", {Workload("c", {{"cpu", "100m"}, {"memory", "64Mi"}})}}}}};
  };
  const auto scheduled = [](const std::string& name) {
    return WaitUntil([&] { return Pod(name)["spec"].value("nodeName", "") == "localhost"; }, kWait);
  };
  const int64_t before = asked();
  ASSERT_TRUE(Create(cpu_pod("cpu-up")).ok());
  ASSERT_TRUE(scheduled("cpu-up")) << Pod("cpu-up").dump();
  EXPECT_GT(asked(), before) << "kube-scheduler did not ask choose-cpu-only";

  const Output down = InCluster(
      "$K -n mgpu-system scale deployment/mgpu-scheduler-extender --replicas 0 && "
      "$K -n mgpu-system wait --for=delete pod -l app.kubernetes.io/name=mgpu-scheduler-extender --timeout=120s");
  ASSERT_EQ(down.rc, 0) << down.out;
  ASSERT_TRUE(Create(cpu_pod("cpu-down")).ok());
  EXPECT_TRUE(scheduled("cpu-down")) << "not scheduled while the extender is down: " << Pod("cpu-down").dump();
  const Output up = InCluster(
      "$K -n mgpu-system scale deployment/mgpu-scheduler-extender --replicas 1 && "
      "$K -n mgpu-system rollout status deployment/mgpu-scheduler-extender --timeout=120s");
  ASSERT_EQ(up.rc, 0) << "the extender's own pod was not scheduled without it: " << up.out;
}

TEST_F(RealCluster, EveryComponentKilledMidRun) {
  int next = 0;
  const auto create = [&](int n) {
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      const std::string name = "r-" + std::to_string(next++);
      EXPECT_TRUE(WaitUntil([&] { return Create(MgpuPod(name, 5, 512)).ok(); }, kWait)) << name;
      names.push_back(name);
    }
    return names;
  };
  std::vector<std::string> running;
  int refused = 0, canaries = 0;
  for (const std::string component :
       {"plugin", "extender", "kubelet", "containerd", "kube-apiserver", "etcd"}) {
    SCOPED_TRACE(component);
    const std::vector<std::string> before = create(2);
    const int plugin_restarts = PluginRestarts();
    if (component == "plugin" || component == "extender") {
      // The daemon's process in its container, killed as by the OOM killer: the kubelet restarts it.
      const std::string binary = component == "plugin" ? "/mgpu-device-plugin" : "/mgpu-scheduler-extender";
      const Output killed =
          Shell("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case \"$c\" in \"" +
                binary + " --config\"*) kill -KILL ${p#/proc/} && echo killed;; esac; done");
      EXPECT_NE(killed.out.find("killed"), std::string::npos) << killed.out;
      if (component == "plugin") {
        ASSERT_TRUE(WaitUntil([&] { return PluginRestarts() > plugin_restarts && PluginServes(); }, kWait));
      }
    } else {
      const Output restarted = Shell(cluster_ + " restart " + component + options_);
      ASSERT_EQ(restarted.rc, 0) << restarted.out;
    }
    // A plugin killed says nothing (no SIGTERM, no stopping inventory), and a restarted kubelet admits pods
    // before the plugin has registered with it again: until the kubelet counts the cards healthy again, a pod
    // bound here fails admission (README, Troubleshooting). Wait until it admits a canary pod (one that
    // failed is deleted).
    if (component == "plugin" || component == "kubelet") {
      std::string canary, refusal;
      ASSERT_TRUE(WaitUntil(
          [&] {
            canary = "canary-" + std::to_string(canaries++);
            const kube::ApiResult created = Create(MgpuPod(canary, 5, 512));
            refusal = created.ok() ? "" : created.message();
            if (!created.ok()) return false;
            std::string phase;
            WaitUntil(
                [&] {
                  phase = Pod(canary)["status"].value("phase", "");
                  return phase == "Running" || phase == "Failed";
                },
                kWait);
            if (phase == "Running") return true;
            (void)client_->Delete(kube::kPods, "default", canary);
            return false;
          },
          kWait))
          << "the last canary, " << canary << ": " << (refusal.empty() ? Pod(canary).dump() : refusal);
    }
    const std::vector<std::string> after = create(2);
    for (const std::string& name : before) {
      ASSERT_TRUE(WaitUntil(
          [&] {
            const json pod = Pod(name);
            const std::string phase = pod["status"].value("phase", "");
            return (phase == "Running" && Held(pod)) || phase == "Failed";
          },
          kWait))
          << name << ": " << Pod(name).dump();
      const json pod = Pod(name);
      if (pod["status"].value("phase", "") == "Running") {
        running.push_back(name);
        continue;
      }
      EXPECT_TRUE(component == "plugin" || component == "kubelet")
          << name << " failed: " << pod["status"].dump();
      EXPECT_EQ(pod["status"].value("reason", ""), "UnexpectedAdmissionError") << pod["status"].dump();
      ++refused;
    }
    ASSERT_TRUE(RunningAndHolding(after));
    running.insert(running.end(), after.begin(), after.end());
    ASSERT_TRUE(RunningAndHolding(running)) << "every pod that ran still runs";
  }
  EXPECT_LE(refused, 4) << "only pods in admission when the plugin or the kubelet died";
  ExpectConsistent();
}

}  // namespace
}  // namespace mgpu::testing
