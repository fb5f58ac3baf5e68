// kubectl-mgpu against the fake API server: usage as the extender derives it (allocated over assigned,
// terminated pods and expired assignments release, policy read from the Deployment), the table and JSON, the
// resource domain read from the nodes, which pod holds which slice with its share (pods), the filter's answer
// per node here and from a running extender over TLS (why), and the exit codes.
#include "cli/kubectl_mgpu.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/test_objects.h"
#include "extender/daemon.h"
#include "support/test_certs.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::cli {
namespace {

using namespace testobj;
using nlohmann::json;

class KubectlMgpu : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    kubeconfig_ = dir_.Write("kubeconfig", api_.KubeconfigYaml());
  }

  int Run(std::vector<std::string> args) {
    args.push_back("--kubeconfig");
    args.push_back(kubeconfig_);
    out_.str("");
    err_.str("");
    return cli::Run(args, out_, err_);
  }

  const ResourceNames names_ = Config().Names();
  testing::FakeApiServer api_;
  testing::TempDir dir_;
  std::string kubeconfig_;
  std::ostringstream out_, err_;
};

TEST_F(KubectlMgpu, ShowsUsageAsTheExtenderDerivesIt) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 2, 24576)).ok());
  ASSERT_TRUE(api_.Create("nodes", json{{"metadata", {{"name", "cpu-only"}}}}).ok());
  const int64_t now = UnixNowNs();
  // Allocated by the kubelet, assigned and fresh, assigned long ago (past the TTL), finished.
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("a", 30, 4096), "n1", names_.gpu_allocated,
                                         OneCard("n1-gpu0", 30, 4096)))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("b", 20, 2048), "n1", names_.gpu_assignment,
                                         OneCard("n1-gpu0", 20, 2048), now))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("stale", 50, 1024), "n1", names_.gpu_assignment,
                                         OneCard("n1-gpu1", 50, 1024), now - int64_t{3600} * 1'000'000'000))
                  .ok());
  json done = Placed(Pod("done", 40, 1024), "n1", names_.gpu_allocated, OneCard("n1-gpu1", 40, 1024));
  done["status"]["phase"] = "Succeeded";
  ASSERT_TRUE(api_.Create("pods", done).ok());

  ASSERT_EQ(Run({"nodes"}), 0) << err_.str();
  const std::string table = out_.str();
  EXPECT_NE(table.find("NODE"), std::string::npos) << table;
  EXPECT_NE(table.find("50/100"), std::string::npos) << table;
  EXPECT_NE(table.find("6144/24576"), std::string::npos) << table;
  EXPECT_NE(table.find("default/a,default/b(assigned)"), std::string::npos) << table;
  // Bound an hour ago and never confirmed by the plugin: it still holds its card.
  EXPECT_NE(table.find("default/stale(assigned)"), std::string::npos) << table;
  EXPECT_EQ(table.find("done"), std::string::npos) << table;
  EXPECT_EQ(table.find("cpu-only"), std::string::npos) << table;

  ASSERT_EQ(Run({"nodes", "-o", "json"}), 0) << err_.str();
  const json view = json::parse(out_.str());
  ASSERT_EQ(view["nodes"].size(), 1u);
  const json& cards = view["nodes"][0]["cards"];
  EXPECT_EQ(cards[0]["core"], 50);
  EXPECT_EQ(cards[0]["memoryMiB"], 6144);
  EXPECT_EQ(cards[1]["core"], 50);
  EXPECT_EQ(view["nodes"][0]["pods"].size(), 3u);
}

TEST_F(KubectlMgpu, ReadsTheDomainFromTheNodesAndThePolicyFromTheDeployment) {
  Config volcengine;
  volcengine.resource_domain = "vke.volcengine.com";
  const ResourceNames v = volcengine.Names();
  json node = Node("n1", 1, 24576);
  node["metadata"]["annotations"] = {
      {v.gpu_inventory, node["metadata"]["annotations"][names_.gpu_inventory]}};
  ASSERT_TRUE(api_.Create("nodes", node).ok());
  auto deployment = api_.Create("deployments", {{"metadata",
                                                 {{"name", "train"},
                                                  {"namespace", "default"},
                                                  {"annotations",
                                                   {{std::string(kQosLevelAnnotation), "reclaimed_cores"},
                                                    {v.compute_policy, "guaranteed-burst-share"}}}}}});
  ASSERT_TRUE(deployment.ok());
  auto rs = api_.Create("replicasets", {{"metadata",
                                         {{"name", "train-1"},
                                          {"namespace", "default"},
                                          {"ownerReferences",
                                           {{{"apiVersion", "apps/v1"},
                                             {"kind", "Deployment"},
                                             {"name", "train"},
                                             {"uid", (*deployment)["metadata"]["uid"]},
                                             {"controller", true}}}}}}});
  ASSERT_TRUE(rs.ok());
  const Assignment offline{{ContainerAssignment{"c", {CardShare{"n1-gpu0", 0, 30, 4096}}}}};
  json pod = Pod("train-1-x", 0, 4096);
  pod["spec"]["containers"][0]["resources"]["limits"] = {{v.reclaimed_core, "30"}, {v.memory, "4096"}};
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                         {"kind", "ReplicaSet"},
                                         {"name", "train-1"},
                                         {"uid", (*rs)["metadata"]["uid"]},
                                         {"controller", true}}};
  pod = Placed(pod, "n1", v.gpu_allocated, offline);
  ASSERT_TRUE(api_.Create("pods", pod).ok());

  ASSERT_EQ(Run({"nodes", "n1", "-ojson"}), 0) << err_.str();
  const json view = json::parse(out_.str());
  EXPECT_EQ(view["nodes"][0]["cards"][0]["reclaimedCore"], 30);
  EXPECT_EQ(view["nodes"][0]["cards"][0]["policy"], "guaranteed-burst-share");
}

TEST_F(KubectlMgpu, PodsShowWhoHoldsWhichSliceAndItsShare) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 2, 24576)).ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("a", 30, 4096), "n1", names_.gpu_allocated,
                                         OneCard("n1-gpu1", 30, 4096)))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("b", 20, 12288), "n1", names_.gpu_assignment,
                                         OneCard("n1-gpu0", 20, 12288), UnixNowNs()))
                  .ok());
  json other = Placed(Pod("c", 10, 1024), "n1", names_.gpu_allocated, OneCard("n1-gpu0", 10, 1024));
  other["metadata"]["namespace"] = "team";
  ASSERT_TRUE(api_.Create("pods", other).ok());

  ASSERT_EQ(Run({"pods", "-o", "json"}), 0) << err_.str();
  const json all = json::parse(out_.str())["pods"];
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]["pod"], "default/a");
  EXPECT_EQ(all[0]["allocated"], true);
  EXPECT_DOUBLE_EQ(all[0]["share"].get<double>(), 0.3) << "max(30/100, 4096/24576)";
  EXPECT_EQ(all[0]["containers"][0]["cards"][0]["index"], 1);
  EXPECT_EQ(all[1]["pod"], "default/b");
  EXPECT_EQ(all[1]["allocated"], false);
  EXPECT_DOUBLE_EQ(all[1]["share"].get<double>(), 0.5) << "max(20/100, 12288/24576)";

  ASSERT_EQ(Run({"pods", "-n", "team"}), 0) << err_.str();
  const std::string table = out_.str();
  EXPECT_EQ(table.find("default/"), std::string::npos) << table;
  EXPECT_NE(table.find("team/c"), std::string::npos) << table;
  EXPECT_NE(table.find("0.100"), std::string::npos) << table;
  EXPECT_NE(table.find("SHARE"), std::string::npos) << table;
}

TEST_F(KubectlMgpu, WhyGivesTheFiltersAnswerForEveryNodeHereAndFromTheExtender) {
  ASSERT_TRUE(api_.Create("nodes", Node("full", 1, 8000)).ok());
  ASSERT_TRUE(api_.Create("nodes", Node("roomy", 2, 16000)).ok());
  ASSERT_TRUE(api_.Create("nodes", json{{"metadata", {{"name", "cpu-only"}}}}).ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("big", 80, 4000), "full", names_.gpu_allocated,
                                         OneCard("full-gpu0", 80, 4000)))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Pod("p", 30, 4096)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("greedy", 150, 4096)).ok());

  ASSERT_EQ(Run({"why", "p"}), 0) << err_.str();
  const std::string here = out_.str();
  EXPECT_NE(here.find("roomy     fits"), std::string::npos) << here;
  EXPECT_NE(here.find("full      does not fit  no mgpu card free for 30 percent core and 4096 MiB"),
            std::string::npos)
      << "why full does not fit:\n"
      << here;
  EXPECT_NE(here.find("cpu-only  does not fit"), std::string::npos) << here;
  ASSERT_EQ(Run({"why", "greedy", "-n", "default"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("roomy     cannot fit  invalid mgpu request: pod default/greedy container c"),
            std::string::npos)
      << out_.str();

  // The same answers from a running extender's /filter over TLS (its live cache of the same API server).
  testing::TempDir certs_dir;
  Result<testing::TestCerts> certs = testing::GenerateTestCerts(certs_dir.path());
  ASSERT_TRUE(certs.ok()) << certs.message();
  Config config;
  config.extender.listen_address = "127.0.0.1:0";
  config.extender.tls_cert_file = certs->server_cert;
  config.extender.tls_key_file = certs->server_key;
  extender::Daemon daemon(config);
  kube::ClusterConfig cluster;
  cluster.server = api_.url();
  ASSERT_TRUE(daemon.Start(cluster).ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return daemon.Ready(); }));
  const std::string url = "https://127.0.0.1:" + std::to_string(daemon.port());
  ASSERT_EQ(Run({"why", "p", "--extender", url, "--extender-ca", certs->ca_cert}), 0) << err_.str();
  EXPECT_EQ(out_.str(), here);
  EXPECT_EQ(Run({"why", "p", "--extender", url}), kExitApi) << "an unknown CA";
  EXPECT_NE(err_.str().find("cannot reach the extender"), std::string::npos) << err_.str();
  ASSERT_EQ(Run({"why", "p", "--extender", url, "--insecure-skip-tls-verify"}), 0) << err_.str();
  daemon.Stop();
}

TEST_F(KubectlMgpu, WhyNamesFragmentationAndDefragPlansTheMovesThatMakeRoom) {
  // Node a has two cards with all their core free, but an offline pod on card 1 keeps a two-card pod off it
  // (multi-card pods never share a card with offline pods); node b's one card has room for the offline pod.
  ASSERT_TRUE(api_.Create("nodes", Node("a", 2, 16384)).ok());
  ASSERT_TRUE(api_.Create("nodes", Node("b", 1, 16384)).ok());
  json batch = Pod("batch", 0, 2048);
  batch["metadata"]["annotations"][std::string(kQosLevelAnnotation)] = "reclaimed_cores";
  batch["spec"]["containers"][0]["resources"]["limits"] = {{names_.reclaimed_core, "40"},
                                                           {names_.memory, "2048"}};
  const Assignment offline{{ContainerAssignment{"c", {CardShare{"a-gpu1", 0, 40, 2048}}}}};
  ASSERT_TRUE(api_.Create("pods", Placed(batch, "a", names_.gpu_allocated, offline)).ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("web", 50, 2048), "b", names_.gpu_allocated,
                                         OneCard("b-gpu0", 50, 2048)))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Pod("train", 200, 8192)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("small", 30, 1024)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("huge", 400, 8192)).ok());

  ASSERT_EQ(Run({"why", "train"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("No node fits, though the free capacity of the nodes it may use would hold it: "
                            "fragmentation. kubectl mgpu defrag --dry-run default/train shows"),
            std::string::npos)
      << out_.str();
  // Four whole cards: no node has so many, which moving pods cannot change.
  ASSERT_EQ(Run({"why", "huge"}), 0) << err_.str();
  EXPECT_NE(
      out_.str().find("No node fits: the 2 nodes pod default/huge may use could not hold it even with "
                      "no other pod on them: fewer than 4 mgpu cards free for 100 percent core and 2048 "
                      "MiB each (more cards than the node has)."),
      std::string::npos)
      << out_.str();
  ASSERT_EQ(Run({"why", "small"}), 0) << err_.str();
  EXPECT_EQ(out_.str().find("No node fits"), std::string::npos) << out_.str();

  EXPECT_EQ(Run({"defrag", "train"}), kExitUsage) << "only a dry run";
  EXPECT_NE(err_.str().find("pass --dry-run"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"nodes", "--dry-run"}), kExitUsage);
  ASSERT_EQ(Run({"defrag", "--dry-run", "train"}), 0) << err_.str();
  const std::string plan = out_.str();
  EXPECT_NE(plan.find("makes room on node a:"), std::string::npos) << plan;
  EXPECT_NE(plan.find("1     default/batch  a     b   0"), std::string::npos) << plan;
  EXPECT_NE(plan.find("then pod default/train fits node a on card(s) 0,1"), std::string::npos) << plan;
  ASSERT_EQ(Run({"defrag", "--dry-run", "small", "-n", "default"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("pod default/small fits node"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"defrag", "--dry-run", "huge"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("moving pods cannot help"), std::string::npos) << out_.str();
  EXPECT_EQ(Run({"defrag", "--dry-run", "nobody"}), kExitApi);
}

// Beside free capacity that is short, a pod no node could hold even with no other pod on it is told apart
// from one fragmentation keeps off: larger than any card, more cards than any node has, no node of a GPU
// model it may use. The per-node lines and the summary say the same.
TEST_F(KubectlMgpu, WhyAndDefragSayWhatNoNodeCouldEverHoldInsteadOfFragmentation) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1, 81920)).ok());
  ASSERT_TRUE(api_.Create("nodes", Node("n2", 1, 81920)).ok());
  for (const std::string node : {"n1", "n2"})
    ASSERT_TRUE(api_.Create("pods", Placed(Pod("x-" + node, 60, 1024), node, names_.gpu_allocated,
                                           OneCard(node + "-gpu0", 60, 1024)))
                    .ok());
  // 40 + 40 percent core and 2 x 80896 MiB free: the sums would hold 50 percent core and 100 GiB.
  ASSERT_TRUE(api_.Create("pods", Pod("too-big", 50, 102400)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("wide", 200, 2048)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("short", 90, 1024)).ok());
  json pinned = Pod("pinned", 10, 1024);
  pinned["spec"]["nodeSelector"] = {{names_.label_product, "A100"}};
  ASSERT_TRUE(api_.Create("pods", pinned).ok());

  const std::string larger =
      "the 2 nodes pod default/too-big may use could not hold it even with no other pod on them: no mgpu "
      "card free for 50 percent core and 102400 MiB (larger than any card)";
  for (const std::string pod : {"too-big", "default/too-big"}) {
    ASSERT_EQ(Run({"why", pod}), 0) << err_.str();
    const std::string why = out_.str();
    EXPECT_NE(
        why.find("n1    does not fit  no mgpu card free for 50 percent core and 102400 MiB (larger than "
                 "any card)"),
        std::string::npos)
        << why;
    EXPECT_NE(why.find("\nNo node fits: " + larger + ".\n"), std::string::npos) << why;
    EXPECT_EQ(why.find("fragmentation"), std::string::npos) << why;
    ASSERT_EQ(Run({"defrag", "--dry-run", pod}), 0) << err_.str();
    EXPECT_EQ(out_.str(), "pod default/too-big fits no node, and moving pods cannot help: " + larger + "\n");
  }
  ASSERT_EQ(Run({"why", "wide"}), 0) << err_.str();
  EXPECT_NE(
      out_.str().find("No node fits: the 2 nodes pod default/wide may use could not hold it even with no "
                      "other pod on them: fewer than 2 mgpu cards free for 100 percent core and 1024 MiB "
                      "each (more cards than the node has)."),
      std::string::npos)
      << out_.str();
  ASSERT_EQ(Run({"why", "short"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("No node fits: the nodes pod default/short may use have 80 percent core free in "
                            "all, it asks for 90."),
            std::string::npos)
      << out_.str();
  ASSERT_EQ(Run({"defrag", "--dry-run", "pinned"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "pod default/pinned fits no node, and moving pods cannot help: no node has a GPU model pod "
            "default/pinned may use (A100)\n");
}

// why and defrag take a pod as mgpu's tables print it (NAMESPACE/NAME), or NAME with -n, or NAME in the
// kubeconfig context's namespace, as kubectl does.
TEST_F(KubectlMgpu, WhyAndDefragTakeThePodAsTheTablesPrintIt) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1, 24576)).ok());
  json placed = Placed(Pod("p", 30, 4096), "n1", names_.gpu_allocated, OneCard("n1-gpu0", 30, 4096));
  placed["metadata"]["namespace"] = "team";
  ASSERT_TRUE(api_.Create("pods", placed).ok());
  ASSERT_EQ(Run({"pods"}), 0) << err_.str();
  ASSERT_NE(out_.str().find("team/p "), std::string::npos) << out_.str();

  for (const std::vector<std::string>& given : std::vector<std::vector<std::string>>{
           {"team/p"}, {"p", "-n", "team"}, {"p", "--namespace=team"}, {"team/p", "-n", "team"}}) {
    std::vector<std::string> why = {"why"}, defrag = {"defrag", "--dry-run"};
    why.insert(why.end(), given.begin(), given.end());
    defrag.insert(defrag.end(), given.begin(), given.end());
    ASSERT_EQ(Run(why), 0) << given.front() << ": " << err_.str();
    EXPECT_NE(out_.str().find("n1    fits"), std::string::npos) << out_.str();
    ASSERT_EQ(Run(defrag), 0) << given.front() << ": " << err_.str();
    EXPECT_EQ(out_.str().rfind("pod team/p fits node n1 now", 0), 0u) << out_.str();
  }
  EXPECT_EQ(Run({"why", "team/p", "-n", "other"}), kExitUsage);
  EXPECT_EQ(err_.str().substr(0, err_.str().find('\n')),
            "kubectl-mgpu: pod team/p is in namespace team, but -n says other");
  EXPECT_EQ(Run({"defrag", "--dry-run", "team/p/x"}), kExitUsage);
  EXPECT_NE(err_.str().find("pod \"team/p/x\" is neither NAME nor NAMESPACE/NAME"), std::string::npos)
      << err_.str();
  EXPECT_EQ(Run({"why", "/p"}), kExitUsage);
  EXPECT_EQ(Run({"why", "p"}), kExitApi) << "not in default";
  EXPECT_NE(err_.str().find("cannot read pod default/p "), std::string::npos) << err_.str();

  // The kubeconfig context's namespace, as kubectl reads it.
  std::string yaml = api_.KubeconfigYaml();
  const std::string context = "context: {cluster: mgpu-local, user: mgpu-local";
  ASSERT_NE(yaml.find(context), std::string::npos) << yaml;
  yaml.replace(yaml.find(context), context.size(), context + ", namespace: team");
  const std::string team_kubeconfig = dir_.Write("team-kubeconfig", yaml);
  out_.str("");
  err_.str("");
  ASSERT_EQ(cli::Run({"why", "p", "--kubeconfig", team_kubeconfig}, out_, err_), 0) << err_.str();
  EXPECT_NE(out_.str().find("n1    fits"), std::string::npos) << out_.str();
}

TEST_F(KubectlMgpu, ExitCodesSayWhatWentWrong) {
  EXPECT_EQ(Run({"nodes"}), kExitNoNodes);
  EXPECT_NE(err_.str().find("mgpu.io/gpu-inventory"), std::string::npos) << err_.str();

  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1)).ok());
  EXPECT_EQ(Run({"nodes", "n2"}), kExitNoNodes);
  EXPECT_NE(err_.str().find("node n2"), std::string::npos) << err_.str();

  EXPECT_EQ(Run({"nodes", "-o", "yaml"}), kExitUsage);
  EXPECT_EQ(Run({"pod"}), kExitUsage);
  EXPECT_EQ(Run({"why"}), kExitUsage) << "why takes one pod";
  EXPECT_EQ(Run({"nodes", "--extender", "http://127.0.0.1:1"}), kExitUsage);
  EXPECT_EQ(Run({"why", "nobody"}), kExitApi);
  EXPECT_NE(err_.str().find("default/nobody"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({}), kExitUsage);
  EXPECT_EQ(Run({"nodes", "--bogus"}), kExitUsage);
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_NE(out_.str().find("kubectl mgpu nodes"), std::string::npos);

  EXPECT_EQ(Run({"nodes", "--config", dir_.path() + "/missing.yaml"}), kExitConfig);
  std::ostringstream out, err;
  EXPECT_EQ(cli::Run({"nodes", "--kubeconfig", dir_.path() + "/missing"}, out, err), kExitConfig);

  const int port = api_.port();
  api_.Stop();
  EXPECT_EQ(Run({"nodes"}), kExitApi);
  EXPECT_NE(err_.str().find(std::to_string(port)), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace mgpu::cli
