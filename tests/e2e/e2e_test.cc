// mgpu end to end, in one process (src/testing/local_cluster.h): the fake API server, the scheduler
// extender, a device plugin and a kubelet per node, and kube-scheduler's calls to the extender. Every test
// ends with LocalCluster::CheckConsistency (every container's environment matches what its pod holds,
// gpu-allocated or else gpu-assignment, and the extender's assignment; no card over-committed) and with
// kubectl-mgpu showing what the extender sees. Waits are on conditions with deadlines; nothing is timed.
// tests/realcluster/ runs the same cases on a real kube-apiserver, kube-scheduler, kubelet and containerd
// with mgpu deployed from deploy/; these stay for what a real cluster cannot give every run: several GPU
// nodes, the Volcengine resource domain end to end (deploy/'s kube-scheduler manages mgpu.io), restarts
// between two kubelet calls, and machines without the Kubernetes binaries.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "cli/kubectl_mgpu.h"
#include "common/codec.h"
#include "common/file.h"
#include "common/manifest.h"
#include "testing/local_cluster.h"
#include "testing/test_env.h"

namespace mgpu::testing {
namespace {

using nlohmann::json;

std::string ReadText(const std::string& path) {
  Result<std::string> text = mgpu::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.message();
  return text.ok() ? *text : "";
}

const std::string kExamples = std::string(MGPU_SOURCE_DIR) + "/deploy/examples/";
const std::string kSeeds = std::string(MGPU_FIXTURES_DIR) + "/seed-scenarios/";

std::vector<Card> Cards(const std::string& prefix, int count, const std::string& model, int64_t memory_mib) {
  std::vector<Card> cards;
  for (int i = 0; i < count; ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%s-%04x-4e6f-9a1b-5d2c7e9f%04x", prefix.c_str(), i, i);
    cards.push_back(Card{i, uuid, model, memory_mib, true});
  }
  return cards;
}

class EndToEnd : public ::testing::Test {
 protected:
  // Starts a cluster with `config` and `nodes`.
  void Start(Config config, std::vector<LocalNode> nodes) {
    LocalClusterOptions options;
    options.config = std::move(config);
    options.nodes = std::move(nodes);
    options.work_dir = dir_.path();
    options.seed = 20261123;
    cluster_ = std::make_unique<LocalCluster>(std::move(options));
    const Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.message();
  }

  // The demo's cluster: deploy/examples/demo-config.yaml and nodes.yaml.
  void StartDemoCluster() {
    Result<Config> config = LoadConfigFile(kExamples + "demo-config.yaml");
    ASSERT_TRUE(config.ok()) << config.message();
    Result<std::vector<SampleNode>> samples = SampleNodesOf(ReadText(kExamples + "nodes.yaml"));
    ASSERT_TRUE(samples.ok()) << samples.message();
    std::vector<LocalNode> nodes;
    for (const SampleNode& s : *samples) nodes.push_back({s.name, s.inventory.cards});
    Start(*config, nodes);
  }

  json Pod(const std::string& key) {
    return cluster_->api()
        .Get("pods", key.substr(0, key.find('/')), key.substr(key.find('/') + 1))
        .value_or(json());
  }

  // The cards the pod holds (its gpu-allocated, else its gpu-assignment: the plugin writes gpu-allocated only
  // where they differ), by container: the indexes of its cards on its node.
  std::map<std::string, std::vector<int>> CardIndexes(const std::string& key) {
    const json pod = Pod(key);
    std::map<std::string, std::vector<int>> out;
    const json annotations = pod["metadata"].value("annotations", json::object());
    const ResourceNames names = cluster_->config().Names();
    const std::string text =
        annotations.value(names.gpu_allocated, annotations.value(names.gpu_assignment, ""));
    Result<Assignment> allocated = DecodeAssignment(text);
    if (!allocated.ok()) return out;
    for (const LocalNode& node : cluster_->nodes()) {
      if (node.name != pod["spec"].value("nodeName", "")) continue;
      for (const ContainerAssignment& c : allocated->containers)
        for (const CardShare& s : c.cards)
          for (const Card& card : node.cards)
            if (card.uuid == s.uuid) out[c.container].push_back(card.index);
    }
    return out;
  }

  // Settles, then checks the hand-off, and that kubectl-mgpu shows exactly the extender's own view.
  void ExpectConsistent() {
    ASSERT_TRUE(cluster_->WaitSettled()) << "the kubelets did not admit every bound pod";
    const Status consistent = cluster_->CheckConsistency();
    EXPECT_TRUE(consistent.ok()) << consistent.message();
    // The extender's /v1/nodes, once its watch has caught up with every admission and gpu-allocated.
    httplib::Client http(cluster_->extender_url());
    json extender;
    EXPECT_TRUE(WaitUntil([&] {
      httplib::Result res = http.Get("/v1/nodes");
      if (!res || res->status != 200) return false;
      extender = json::parse(res->body, nullptr, false);
      for (const json& node : extender.value("nodes", json::array()))
        for (const json& pod : node["pods"])
          if (!pod.value("allocated", false)) return false;
      return true;
    }));
    EXPECT_EQ(KubectlMgpu({"nodes", "-o", "json"}), extender.dump(2) + "\n");
  }

  std::string KubectlMgpu(std::vector<std::string> args) {
    args.push_back("--kubeconfig");
    args.push_back(cluster_->kubeconfig_path());
    std::ostringstream out, err;
    EXPECT_EQ(cli::Run(args, out, err), 0) << err.str();
    return out.str();
  }

  TempDir dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

// The README's demo: online and offline Deployments sharing a card, a 2-card pod, whole-card pods, pods that
// fit nowhere or break a rule.
TEST_F(EndToEnd, SeedScenariosOfTheDemo) {
  StartDemoCluster();
  Result<std::vector<std::string>> pods = cluster_->Submit(ReadText(kExamples + "workloads.yaml"));
  ASSERT_TRUE(pods.ok()) << pods.message();
  const std::map<std::string, SchedulingOutcome> outcomes = cluster_->SchedulePending();
  ExpectConsistent();

  for (const char* key : {"default/infer-online-0", "default/infer-online-1", "default/train-offline-0",
                          "default/train-offline-1"}) {
    EXPECT_EQ(outcomes.at(key).node, "node-a10") << key << ": " << outcomes.at(key).message;
    EXPECT_EQ(CardIndexes(key),
              (std::map<std::string, std::vector<int>>{{Pod(key)["spec"]["containers"][0]["name"], {0}}}))
        << key << " shares card 0";
  }
  EXPECT_EQ(outcomes.at("default/two-card").node, "node-h100");
  EXPECT_EQ(CardIndexes("default/two-card").at("worker").size(), 2u);
  std::set<int> whole;
  for (const char* key : {"default/llm-0", "default/llm-1"}) {
    EXPECT_EQ(outcomes.at(key).node, "node-h100");
    whole.insert(CardIndexes(key).at("llm").front());
  }
  EXPECT_EQ(whole.size(), 2u) << "each whole-card pod has a card of its own";
  EXPECT_EQ(outcomes.at("default/too-big").node, "");
  EXPECT_NE(outcomes.at("default/too-big").message.find("0/2 nodes are available"), std::string::npos);
  EXPECT_NE(outcomes.at("default/core-150").message.find("multiple of 100"), std::string::npos);
  const std::map<std::string, AdmittedPod> admitted = cluster_->Admitted();
  const auto& env = admitted.at("default/train-offline-0").containers.at(0).admission.envs;
  EXPECT_EQ(env.at("MGPU_QOS_LEVEL"), "offline");
  EXPECT_EQ(env.at("MGPU_RECLAIMED_CORE_PERCENT"), "30");
  EXPECT_EQ(env.at("MGPU_MEMORY_MIB"), "4096") << "4096 MiB written, stored as 256 devices of 16 MiB";

  const std::string table = KubectlMgpu({"nodes", "node-a10"});
  const std::string card0 = table.substr(table.find("\nnode-a10  0 "));
  EXPECT_NE(card0.find("60/100  60/100     16384/24576  default/infer-online-0,"), std::string::npos)
      << table;
}

// The Volcengine mGPU example manifests, unchanged, with resourceDomain: vke.volcengine.com.
TEST_F(EndToEnd, VolcengineExamplesRunUnchanged) {
  Config config;
  config.resource_domain = "vke.volcengine.com";
  config.device_plugin.pod_resources_poll_ms = 100;
  Start(config, {{"vke-a10", Cards("7a10c0de", 2, "NVIDIA A10", 24576)}});
  std::vector<std::string> keys;
  for (const char* file : {"online-offline.yaml", "emr-style.yaml", "bad-requests.yaml"}) {
    Result<std::vector<std::string>> pods = cluster_->Submit(ReadText(kSeeds + file));
    ASSERT_TRUE(pods.ok()) << file << ": " << pods.message();
    keys.insert(keys.end(), pods->begin(), pods->end());
  }
  const std::map<std::string, SchedulingOutcome> outcomes = cluster_->SchedulePending();
  ExpectConsistent();

  // The four of online-offline.yaml on one 24 GiB card: online 60/100, offline 60/100, 16 GiB.
  std::set<int> shared;
  for (const std::string& key : keys) {
    if (key.find("infer-online") == std::string::npos && key.find("train-offline") == std::string::npos)
      continue;
    EXPECT_EQ(outcomes.at(key).node, "vke-a10") << key << ": " << outcomes.at(key).message;
    for (const auto& [container, cards] : CardIndexes(key)) shared.insert(cards.begin(), cards.end());
  }
  EXPECT_EQ(shared.size(), 1u);
  const json view = json::parse(KubectlMgpu({"nodes", "-o", "json"}));
  const json& card = view["nodes"][0]["cards"][*shared.begin()];
  EXPECT_EQ(card["core"], 60);
  EXPECT_EQ(card["reclaimedCore"], 60);
  EXPECT_EQ(card["memoryMiB"], 16384);
  EXPECT_EQ(card["policy"], "guaranteed-burst-share") << "read from the Deployments' annotations";
  EXPECT_EQ(outcomes.at("default/spark-executor-1").node, "vke-a10");
  // Every bad request stays Pending with a sentence naming the pod.
  for (const char* name : {"core-without-memory", "core-150", "core-too-small", "online-asks-reclaimed",
                           "offline-multi-card", "offline-native-burst", "unknown-qos", "uneven-split"}) {
    const SchedulingOutcome& o = outcomes.at(std::string("default/") + name);
    EXPECT_EQ(o.node, "") << name;
    EXPECT_NE(o.message.find(name), std::string::npos) << name << ": " << o.message;
  }
}

// Many pods of every shape, created in random order across three nodes; a device plugin restart, a kubelet
// restart and an extender restart in the middle; pods deleted and their cards reused.
TEST_F(EndToEnd, ManyPodsInRandomOrderThroughRestarts) {
  Config config;
  config.memory_unit_mib = 16;
  config.device_plugin.pod_resources_poll_ms = 100;
  Start(config, {{"node-a", Cards("0a0a0a0a", 4, "Test GPU", 16384)},
                 {"node-b", Cards("0b0b0b0b", 4, "Test GPU", 16384)},
                 {"node-c", Cards("0c0c0c0c", 2, "Test GPU", 24576)}});
  const ResourceNames names = cluster_->config().Names();
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<json> pods;
  for (int i = 0; i < 72; ++i) {
    json limits;
    json annotations = json::object();
    const int shape = pick(0, 19);
    if (shape <= 10) {  // online share
      limits = {{names.core, pick(1, 8) * 5}, {names.memory, pick(1, 16) * 16}};
    } else if (shape <= 16) {  // offline share
      annotations[std::string(kQosLevelAnnotation)] = "reclaimed_cores";
      limits = {{names.reclaimed_core, pick(1, 12) * 5}, {names.memory, pick(1, 16) * 16}};
    } else if (shape <= 18) {  // two cards
      annotations[names.gpu_count] = "2";
      limits = {{names.core, pick(1, 5) * 20}, {names.memory, pick(1, 8) * 32}};
    } else {  // a whole card
      annotations[std::string(kQosLevelAnnotation)] = "dedicated_cores";
      limits = {{names.core, 100}, {names.memory, 1024}};
    }
    if (pick(0, 3) == 0) annotations[names.compute_policy] = "guaranteed-burst-share";
    pods.push_back(
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata",
          {{"name", "p" + std::to_string(i)}, {"namespace", "default"}, {"annotations", annotations}}},
         {"spec", {{"containers", {{{"name", "c"}, {"image", "x"}, {"resources", {{"limits", limits}}}}}}}},
         {"status", {{"phase", "Pending"}}}});
  }
  std::shuffle(pods.begin(), pods.end(), rng);
  const size_t third = pods.size() / 3;
  auto submit_and_schedule = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) ASSERT_TRUE(cluster_->api().Create("pods", pods[i]).ok());
    for (const auto& [key, outcome] : cluster_->SchedulePending())
      EXPECT_FALSE(outcome.retry) << key << " kept failing: " << outcome.message;
  };

  submit_and_schedule(0, third);
  const Status plugin = cluster_->RestartPlugin("node-a");
  ASSERT_TRUE(plugin.ok()) << plugin.message();
  submit_and_schedule(third, 2 * third);
  const Status kubelet = cluster_->RestartKubelet("node-b");
  ASSERT_TRUE(kubelet.ok()) << kubelet.message();
  const Status extender = cluster_->RestartExtender();
  ASSERT_TRUE(extender.ok()) << extender.message();
  ASSERT_TRUE(cluster_->WaitSettled());
  // Free some cards: the kubelets release them, the extender and kubectl-mgpu stop counting them.
  int deleted = 0;
  for (const auto& [key, pod] : cluster_->Admitted()) {
    if (deleted == 8) break;
    ASSERT_TRUE(cluster_->api().Delete("pods", "default", key.substr(key.find('/') + 1)).ok());
    ++deleted;
  }
  submit_and_schedule(2 * third, pods.size());
  ExpectConsistent();

  const std::map<std::string, AdmittedPod> admitted = cluster_->Admitted();
  EXPECT_GT(admitted.size(), pods.size() / 2) << "most pods fit";
  std::set<std::string> nodes;
  for (const auto& [key, pod] : admitted) nodes.insert(pod.node);
  EXPECT_EQ(nodes.size(), 3u) << "pods landed on every node";
}

}  // namespace
}  // namespace mgpu::testing
