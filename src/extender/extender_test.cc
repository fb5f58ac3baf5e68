#include "extender/extender.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "common/decision_memo.h"
#include "common/manifest.h"
#include "common/test_objects.h"
#include "extender/server.h"

namespace mgpu::extender {
namespace {

using namespace testobj;
using nlohmann::json;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(MGPU_FIXTURES_DIR) + "/kube-scheduler/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The arguments as the HTTP edge reads them, the pod read by `read` (default: under the default config).
std::shared_ptr<const PodFacts> ReadDefault(const json& pod) {
  return std::make_shared<const PodFacts>(PodOf(pod));
}
ExtenderArgs Args(const json& pod, const std::vector<std::string>& nodes,
                  const PodReader& read = ReadDefault) {
  Result<ExtenderArgs> args =
      ExtenderArgs::Parse(json{{"Pod", pod}, {"NodeNames", nodes}, {"Nodes", nullptr}}.dump(), read);
  EXPECT_TRUE(args.ok()) << args.message();
  return *args;
}

class ExtenderTest : public ::testing::Test {
 protected:
  ExtenderTest() : cache_(Config()), extender_(cache_, nullptr, nullptr, metrics_) {
    cache_.UpsertNode(NodeOf(Node("full", 1, 8000)));
    cache_.UpsertNode(NodeOf(Node("empty", 2, 16000)));
    cache_.UpsertNode(NodeOf(Node("half", 1, 16000)));
    cache_.UpsertPod(
        PodOf(Placed(Pod("big", 80, 4000), "full", names_.gpu_allocated, OneCard("full-gpu0", 80, 4000))));
    cache_.UpsertPod(
        PodOf(Placed(Pod("mid", 50, 8000), "half", names_.gpu_allocated, OneCard("half-gpu0", 50, 8000))));
  }
  const ResourceNames names_ = Config().Names();
  ClusterCache cache_;
  Metrics metrics_;
  Extender extender_;
};

// Decisions are kept per pod shape: everything a node's cost depends on is in the shape.
TEST(ShapeKey, DiffersByEveryInputOfTheCost) {
  PodRequest a;
  a.containers.push_back(ContainerRequest{"c", false, 50, 0, 1024, 1});
  PodRequest b = a;
  EXPECT_EQ(ShapeKey(a), ShapeKey(b));
  b.cpu_milli = 4000;
  EXPECT_NE(ShapeKey(a), ShapeKey(b));
  b = a;
  b.host_memory_mib = 4096;
  EXPECT_NE(ShapeKey(a), ShapeKey(b));
  b = a;
  b.containers[0].core = 60;
  EXPECT_NE(ShapeKey(a), ShapeKey(b));
}

TEST_F(ExtenderTest, FilterGivesEveryFailingNodeAReason) {
  const FilterResult r = extender_.Filter(Args(Pod("p", 30, 4096), {"full", "empty", "half", "cpu-only"}));
  ASSERT_EQ(r.passed.size(), 2u);
  EXPECT_EQ(r.passed[0], 1u);
  EXPECT_EQ(r.passed[1], 2u);
  ASSERT_EQ(r.failed.count("full"), 1u);
  EXPECT_EQ(r.failed.at("full"), "no mgpu card free for 30 percent core and 4096 MiB");
  EXPECT_NE(r.failed.at("cpu-only").find("gpu-inventory"), std::string::npos);
  EXPECT_TRUE(r.unresolvable.empty());
  EXPECT_NE(metrics_.Render(*cache_.Snapshot())
                .find("mgpu_extender_filter_failures_total{reason=\"insufficient\"} 1"),
            std::string::npos);
}

// A pod read at the edge is remembered for the verbs that follow (the same facts for the same version), and
// forgotten once the informer sees it deleted.
TEST_F(ExtenderTest, ReadRemembersAPodUntilItIsForgotten) {
  json pod = Pod("p", 30, 4096);
  pod["metadata"]["resourceVersion"] = "7";
  const std::shared_ptr<const PodFacts> first = extender_.Read(pod);
  ASSERT_FALSE(first->uid.empty());
  EXPECT_EQ(extender_.Read(pod), first) << "remembered";
  extender_.Forget(first->uid);
  const std::shared_ptr<const PodFacts> again = extender_.Read(pod);
  EXPECT_NE(again, first) << "read again once forgotten";
  EXPECT_EQ(again->key, first->key);
}

TEST_F(ExtenderTest, MetricsReportClusterRatiosAndPodShares) {
  const std::string text = metrics_.Render(*cache_.Snapshot());
  const auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << " missing from\n" << text;
  };
  has("mgpu_extender_cluster_core_allocated_ratio 0.325");       // (80 + 50) / 400
  has("mgpu_extender_cluster_memory_allocated_ratio 0.214286");  // 12000 / 56000
  has("mgpu_extender_cluster_fragmentation_ratio 0.259259");     // (20 + 50) / 270 free
  // Core beats 4000/8000.
  has(R"(mgpu_extender_pod_gpu_share{node="full",namespace="default",pod="big"} 0.8)");
  has(R"(mgpu_extender_pod_gpu_share{node="half",namespace="default",pod="mid"} 0.5)");
}

// A pod asking for no mgpu resource (issue 41): choose and choose-cpu-only send it where it strands the
// fewest free cards: a node without mgpu cards when one is a candidate (kube-scheduler's scores choose among
// several), else the fullest node (no workload learned yet: binpack); prioritize scores the same way.
// choose-cpu-only passes a GPU pod on every node it came with (the first extender entry decided it).
TEST_F(ExtenderTest, CpuOnlyPodsGoWhereTheyStrandTheFewestCards) {
  json cpu_pod = Pod("web", 0, 0);
  cpu_pod["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "2"}, {"memory", "1Gi"}}}};
  const ExtenderArgs gpu_nodes = Args(cpu_pod, {"empty", "half", "full"});
  EXPECT_EQ(extender_.Choose(gpu_nodes).passed, std::vector<size_t>{2});
  EXPECT_EQ(extender_.ChooseCpuOnly(gpu_nodes).passed, std::vector<size_t>{2});
  const std::vector<HostScore> scores = extender_.Prioritize(gpu_nodes);
  EXPECT_GT(scores[2].score, scores[1].score);
  EXPECT_GT(scores[1].score, scores[0].score);
  // Nodes without mgpu cards first, all of them.
  const ExtenderArgs mixed = Args(cpu_pod, {"full", "cpu-a", "empty", "cpu-b"});
  EXPECT_EQ(extender_.Choose(mixed).passed, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(extender_.ChooseCpuOnly(mixed).passed, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(extender_.Prioritize(mixed)[0].score, 0);
  EXPECT_EQ(extender_.Prioritize(mixed)[3].score, 10);
  // A GPU pod: choose-cpu-only leaves it where it is.
  const ExtenderArgs gpu_pod = Args(Pod("p", 30, 4096), {"empty", "half"});
  EXPECT_EQ(extender_.ChooseCpuOnly(gpu_pod).passed, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(extender_.Choose(gpu_pod).passed.size(), 1u);
}

TEST_F(ExtenderTest, RuleViolationsAreUnresolvableEverywhere) {
  const FilterResult r = extender_.Filter(Args(Pod("p", 150, 4096), {"empty", "half"}));
  EXPECT_TRUE(r.passed.empty());
  ASSERT_EQ(r.unresolvable.size(), 2u);
  EXPECT_NE(r.unresolvable.at("empty").find("default/p"), std::string::npos) << r.unresolvable.at("empty");
}

TEST_F(ExtenderTest, PodsWithoutGpuPassEverywhere) {
  Result<ExtenderArgs> args = ExtenderArgs::Parse(Fixture("v1.32/cache-filter-001.json"), extender_.Reader());
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(extender_.Filter(*args).passed.size(), 2u);
}

TEST_F(ExtenderTest, PrioritizeBinpackPrefersTheFullerNode) {
  // The scores name their hosts by views into the arguments: those must outlive them.
  const ExtenderArgs args = Args(Pod("p", 20, 1000), {"empty", "half", "full"});
  const std::vector<HostScore> scores = extender_.Prioritize(args);
  ASSERT_EQ(scores.size(), 3u);
  EXPECT_EQ(scores[2].host, "full");
  EXPECT_EQ(scores[2].score, 10);  // fullest node that still fits
  EXPECT_LT(scores[0].score, scores[1].score);
  for (const HostScore& s : scores) EXPECT_TRUE(s.score >= 0 && s.score <= 10);
  // A node where the pod does not fit scores 0.
  EXPECT_EQ(extender_.Prioritize(Args(Pod("q", 90, 1000), {"full", "empty"}))[0].score, 0);
}

// Node "waits" would win on binpack, but its card 0 holds pod a, still waiting for the kubelet, and the pod
// would go to card 1 asking the same memory: the device plugin could confuse the two, so a bind there would
// wait. Prioritize ranks it last; a look-alike of a, which would not wait, still prefers it.
TEST_F(ExtenderTest, PrioritizeRanksANodeWhereTheBindWouldWaitLast) {
  cache_.UpsertNode(NodeOf(Node("waits", 2, 10000)));
  cache_.UpsertPod(PodOf(Placed(Pod("a", 80, 2000), "waits", names_.gpu_assignment,
                                OneCard("waits-gpu0", 80, 2000), UnixNowNs())));
  const ExtenderArgs args = Args(Pod("p", 50, 2000), {"waits", "empty"});
  const std::vector<HostScore> scores = extender_.Prioritize(args);
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0].score, 0);
  EXPECT_GT(scores[1].score, 0);
  const ExtenderArgs alike = Args(Pod("q", 10, 2000), {"waits", "empty"});
  const std::vector<HostScore> alike_scores = extender_.Prioritize(alike);
  EXPECT_GT(alike_scores[0].score, alike_scores[1].score);
}

// The fuller T4 node would win on fragmentation alone, but the cluster has little T4 left for the pods that
// may only use T4: an unbound pod goes to a G2 node.
TEST(ExtenderPressure, UnboundPodsLeaveScarceModelsToThePodsBoundToThem) {
  const Config config;  // fragmentation by default
  ClusterCache cache(config);
  Metrics metrics;
  Extender extender(cache, nullptr, nullptr, metrics);
  cache.UpsertNode(NodeOf(Node("t4", 1, 16384, "T4")));
  cache.UpsertPod(
      PodOf(Placed(Pod("old", 50, 1000), "t4", config.Names().gpu_allocated, OneCard("t4-gpu0", 50, 1000))));
  for (int i = 0; i < 100; ++i) cache.UpsertNode(NodeOf(Node("g2-" + std::to_string(i), 1, 16384, "G2")));
  nlohmann::json bound = Pod("bound", 50, 1000);
  bound["spec"]["nodeSelector"][config.Names().label_product] = "T4";
  extender.Filter(Args(bound, {"t4"}));
  for (int i = 0; i < 99; ++i)
    extender.Filter(Args(Pod("any-" + std::to_string(i), 50, 1000), {"t4", "g2-0"}));
  const ExtenderArgs args = Args(Pod("p", 50, 1000), {"t4", "g2-0"});
  const std::vector<HostScore> scores = extender.Prioritize(args);
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_LT(scores[0].score, scores[1].score);
}

// Node a's two cards have all their core free, but an offline pod on card 1 keeps two-card pods off them;
// /metrics counts the two-card pod as blocked by fragmentation (not the pod the free capacity is short for),
// until a filter finds it a node or the note expires.
TEST(ExtenderDefrag, MetricsCountPodsThatFragmentationKeepsOffEveryNode) {
  const Config config;
  ClusterCache cache(config);
  auto now = std::chrono::steady_clock::time_point{};
  Metrics metrics([&now] { return now; });
  Extender extender(cache, nullptr, nullptr, metrics);
  cache.UpsertNode(NodeOf(Node("a", 2, 16384)));
  cache.UpsertNode(NodeOf(Node("b", 1, 16384)));
  nlohmann::json batch = Pod("batch", 0, 2048);
  batch["metadata"]["annotations"][std::string(kQosLevelAnnotation)] = "reclaimed_cores";
  batch["spec"]["containers"][0]["resources"]["limits"] = {{config.Names().reclaimed_core, "40"},
                                                           {config.Names().memory, "2048"}};
  cache.UpsertPod(PodOf(Placed(batch, "a", config.Names().gpu_allocated,
                               Assignment{{ContainerAssignment{"c", {CardShare{"a-gpu1", 0, 40, 2048}}}}})));
  cache.UpsertPod(
      PodOf(Placed(Pod("web", 50, 2048), "b", config.Names().gpu_allocated, OneCard("b-gpu0", 50, 2048))));
  const auto render = [&] { return metrics.Render(*cache.Snapshot()); };
  EXPECT_NE(render().find("mgpu_extender_pods_blocked_by_fragmentation 0\n"), std::string::npos);

  EXPECT_TRUE(extender.Filter(Args(Pod("train", 200, 8192), {"a", "b"})).passed.empty());
  EXPECT_TRUE(
      extender.Filter(Args(Pod("huge", 400, 8192), {"a", "b"})).passed.empty());  // short, not blocked
  std::string text = render();
  EXPECT_NE(text.find("mgpu_extender_pods_blocked_by_fragmentation 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_extender_pod_blocked_by_fragmentation{pod=\"default/train\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("default/huge"), std::string::npos) << text;

  now += std::chrono::minutes(11);
  EXPECT_NE(render().find("mgpu_extender_pods_blocked_by_fragmentation 0\n"), std::string::npos);
  extender.Filter(Args(Pod("train", 200, 8192), {"a", "b"}));
  EXPECT_NE(render().find("mgpu_extender_pods_blocked_by_fragmentation 1\n"), std::string::npos);
  cache.UpsertNode(NodeOf(Node("c", 2, 16384)));
  EXPECT_EQ(extender.Filter(Args(Pod("train", 200, 8192), {"a", "b", "c"})).passed.size(), 1u);
  EXPECT_NE(render().find("mgpu_extender_pods_blocked_by_fragmentation 0\n"), std::string::npos);
}

TEST_F(ExtenderTest, PreemptKeepsOnlyNodesWhereTheVictimsFreeACard) {
  PreemptArgs args;
  args.pod = ReadDefault(Pod("p", 60, 4000));
  args.victims["full"] = MetaVictims{{"uid-big"}, 0};
  args.victims["half"] = MetaVictims{{"some-cpu-pod"}, 1};  // frees no GPU: 50% left is not enough
  args.victims["unknown"] = MetaVictims{{"x"}, 0};
  const auto out = extender_.Preempt(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.at("full").pod_uids, std::vector<std::string>{"uid-big"});
}

// DRA pods (docs/dra.md §7) on DRA nodes: what the driver's allocated claims hold counts on the nodes' cards,
// so prioritize and choose pack DRA pods by mgpu's policy (binpack here); filter and preempt leave what fits
// to kube-scheduler, whose allocator decides it; device-plugin pods are kept off DRA nodes.
TEST(ExtenderDra, ClaimsCountOnTheirCardsAndDraPodsAreScoredByThem) {
  ClusterCache cache{Config()};
  Metrics metrics;
  Extender extender(cache, nullptr, nullptr, metrics);
  cache.UpsertNode(NodeOf(DraNode("dra-a", 2)));
  cache.UpsertNode(NodeOf(DraNode("dra-b", 2)));
  const json claim = dra::test::Claim(
      "infer-gpu", "uid-claim",
      json::array({dra::test::Result("gpu-1-fixed", {{"cores", "60"}, {"memory", "8Gi"}}, "dra-b")}));
  Result<std::optional<dra::ClaimFacts>> read = dra::ReadClaim(claim, Config());
  ASSERT_TRUE(read.ok() && *read) << read.message();
  cache.UpsertClaim(**read);
  const CardState& held = cache.Snapshot()->Find("dra-b")->state.cards[1];
  EXPECT_EQ(held.usage.core, 60);
  EXPECT_EQ(held.usage.memory_mib, 8192);

  const json pod = DraPod(Pod("p", 30, 4096));
  const std::vector<std::string> nodes = {"dra-a", "dra-b"};
  const ExtenderArgs args = Args(pod, nodes);
  ASSERT_TRUE(args.pod->dra);
  const std::vector<HostScore> scores = extender.Prioritize(args);
  EXPECT_GT(scores[1].score, scores[0].score);  // the fuller node
  EXPECT_EQ(extender.Choose(args).passed, std::vector<size_t>{1});
  // Where its claims fit is kube-scheduler's to say: a pod too big for the extender's view passes anyway.
  EXPECT_EQ(extender.Filter(Args(DraPod(Pod("big", 100, 16384)), nodes)).passed.size(), 2u);
  // Preemption: kube-scheduler's victims stand, also on a node the extender does not know.
  PreemptArgs preempt;
  preempt.pod = args.pod;
  preempt.victims["dra-b"] = MetaVictims{{"uid-someone"}, 0};
  preempt.victims["elsewhere"] = MetaVictims{{"uid-other"}, 0};
  EXPECT_EQ(extender.Preempt(preempt).size(), 2u);
  // A device-plugin pod fits no DRA node, and says why.
  const FilterResult plain = extender.Filter(Args(Pod("q", 30, 4096), nodes));
  EXPECT_TRUE(plain.passed.empty());
  EXPECT_NE(plain.failed.at("dra-a").find("DRA"), std::string::npos) << plain.failed.at("dra-a");

  cache.DeleteClaim("default/infer-gpu");
  EXPECT_EQ(cache.Snapshot()->Find("dra-b")->state.cards[1].usage.core, 0);
}

TEST_F(ExtenderTest, BindWithoutClientIsAnErrorNotACrash) {
  EXPECT_FALSE(extender_.Bind(BindArgs{"p", "default", "u", "empty"}).empty());
}

// kube-scheduler formats an extender's reasons as a format string (schedule_one.go): a verb there garbles
// the text in `kubectl describe pod`. Whatever the extender can say must read the same through printf.
bool SafeAsFormat(const std::string& text) {
  char out[4096];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-security"
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  std::snprintf(out, sizeof out, text.c_str());
#pragma GCC diagnostic pop
  return text.find('%') == std::string::npos && text.substr(0, sizeof out - 1) == out;
}

TEST_F(ExtenderTest, NoReasonIsAFormatString) {
  std::vector<std::string> reasons;
  // Filter: every node problem and every card refusal, for online, offline, multi-card and whole-card pods.
  nlohmann::json bad = Node("bad", 1);
  bad["metadata"]["annotations"][names_.gpu_inventory] = "{not json";
  cache_.UpsertNode(NodeOf(bad));
  Config other_unit;
  other_unit.memory_unit_mib = 16;
  NodeInventory inventory;
  inventory.cards.push_back(Card{0, "u-gpu0", "Test GPU", 16384, false});
  inventory.memory_unit_mib = 16;
  cache_.UpsertNode(
      NodeOf({{"metadata",
               {{"name", "unit"}, {"annotations", {{names_.gpu_inventory, EncodeInventory(inventory)}}}}}}));
  nlohmann::json offline = Pod("off", 0, 2000);
  offline["spec"]["containers"][0]["resources"]["limits"] = {{names_.reclaimed_core, "40"},
                                                             {names_.memory, "20000"}};
  nlohmann::json whole = Pod("whole", 200, 30000);
  nlohmann::json spread = Pod("spread", 100, 2000);
  spread["metadata"]["annotations"][names_.gpu_count] = "2";
  for (const nlohmann::json& pod : {Pod("p", 30, 40000), Pod("q", 90, 1000), offline, whole, spread}) {
    const FilterResult r = extender_.Filter(Args(pod, {"full", "empty", "half", "bad", "unit", "cpu-only"}));
    for (const auto& [node, reason] : r.failed) reasons.push_back(reason);
  }
  // Rule violations: every bad request of the seeds.
  const std::string seeds = std::string(MGPU_FIXTURES_DIR) + "/seed-scenarios/bad-requests.yaml";
  std::ifstream in(seeds);
  std::stringstream text;
  text << in.rdbuf();
  Result<std::vector<ManifestPod>> pods = PodsOfManifests(text.str());
  ASSERT_TRUE(pods.ok());
  Config volcengine;
  volcengine.resource_domain = "vke.volcengine.com";
  ClusterCache cache(volcengine);
  Extender extender(cache, nullptr, nullptr, metrics_);
  for (const ManifestPod& m : *pods)
    for (const auto& [node, reason] : extender.Filter(Args(m.pod, {"n"}, extender.Reader())).unresolvable)
      reasons.push_back(reason);
  // Bind: the guard's wait, a node without inventory, no client, not the leader.
  cache_.UpsertPod(
      PodOf(Placed(Pod("a", 20, 2000), "empty", names_.gpu_assignment, OneCard("empty-gpu0", 20, 2000), 1)));
  cache_.UpsertPod(
      PodOf(Placed(Pod("b", 60, 3000), "empty", names_.gpu_allocated, OneCard("empty-gpu1", 60, 3000))));
  const auto now = std::chrono::steady_clock::now();
  Result<Assignment> wait = cache_.Reserve("empty", ParsePodRequest(Pod("c", 90, 2000), Config()).value(),
                                           "uid-c", 2, nullptr, now);
  ASSERT_FALSE(wait.ok());
  reasons.push_back(wait.message());
  reasons.push_back(
      cache_
          .Reserve("cpu-only", ParsePodRequest(Pod("c", 10, 10), Config()).value(), "uid-c", 2, nullptr, now)
          .message());
  reasons.push_back(extender_.Bind(BindArgs{"p", "default", "u", "empty"}));
  Extender follower(cache_, nullptr, nullptr, metrics_, [] { return false; });
  reasons.push_back(follower.Bind(BindArgs{"p", "default", "u", "empty"}));
  ASSERT_GT(reasons.size(), 30u);
  for (const std::string& reason : reasons) {
    EXPECT_FALSE(reason.empty());
    EXPECT_TRUE(SafeAsFormat(reason)) << reason;
  }
}

class ServerTest : public ExtenderTest {
 protected:
  void SetUp() override {
    ExtenderConfig config;
    config.max_body_bytes = 1 << 20;
    server_ = std::make_unique<HttpServer>(extender_, cache_, metrics_, [this] { return ready_.load(); });
    ASSERT_TRUE(server_->Start("127.0.0.1:0", config).ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  std::atomic<bool> ready_{true};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerTest, RecordedFilterAndPrioritizeInBothModes) {
  for (const char* mode : {"cache", "nocache"}) {
    const std::string prefix = std::string("v1.32/") + mode;
    auto filter = client_->Post("/filter", Fixture(prefix + "-filter-001.json"), "application/json");
    ASSERT_TRUE(filter);
    EXPECT_EQ(filter->status, 200);
    const json reply = json::parse(filter->body);
    const json want = json::parse(Fixture(prefix + "-filter-001.response.json"));
    if (std::string(mode) == "cache") {
      EXPECT_EQ(reply["NodeNames"], want["NodeNames"]);
    } else {
      EXPECT_EQ(reply["Nodes"], want["Nodes"]);
    }
    EXPECT_EQ(reply.value("Error", ""), "");
    auto prioritize =
        client_->Post("/prioritize", Fixture(prefix + "-prioritize-002.json"), "application/json");
    ASSERT_TRUE(prioritize);
    EXPECT_EQ(prioritize->status, 200);
    EXPECT_EQ(json::parse(prioritize->body).size(), 2u);
  }
}

TEST_F(ServerTest, RecordedPreemptAndBind) {
  auto preempt =
      client_->Post("/preempt", Fixture("v1.32-bind-preempt/bp-preempt-006.json"), "application/json");
  ASSERT_TRUE(preempt);
  EXPECT_EQ(preempt->status, 200);
  EXPECT_EQ(json::parse(preempt->body),
            json::parse(Fixture("v1.32-bind-preempt/bp-preempt-006.response.json")));
  auto bind = client_->Post("/bind", Fixture("v1.32-bind-preempt/bp-bind-003.json"), "application/json");
  ASSERT_TRUE(bind);
  EXPECT_EQ(bind->status, 200);
  EXPECT_NE(json::parse(bind->body)["Error"], "");  // no API server here: a scheduling error, not a 4xx
}

TEST_F(ServerTest, MalformedAndHugeRequests) {
  for (const char* path : {"/filter", "/prioritize", "/bind", "/preempt"}) {
    for (const char* body : {"", "{", "{\"Pod\":7}", "[1,2]", "{\"PodName\":{}}"}) {
      auto res = client_->Post(path, body, "application/json");
      ASSERT_TRUE(res) << path;
      EXPECT_EQ(res->status, 400) << path << " " << body;
      EXPECT_FALSE(json::parse(res->body)["Error"].get<std::string>().empty());
    }
  }
  auto huge = client_->Post("/filter", std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  auto ok = client_->Post("/filter", Fixture("v1.32/cache-filter-001.json"), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// Whatever a handler throws (here the readiness check, and not even a std::exception) the caller gets a 500
// with one sentence, and the server keeps serving.
TEST_F(ExtenderTest, AnExceptionInAHandlerIsOneSentenceNotADeadServer) {
  std::atomic<bool> fail{true};
  HttpServer server(extender_, cache_, metrics_, [&]() -> bool {
    if (fail) throw 42;
    return true;
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0", ExtenderConfig()).ok());
  httplib::Client client("127.0.0.1", server.port());
  const std::string args = json{{"Pod", Pod("p", 30, 1000)}, {"NodeNames", {"empty"}}}.dump();
  const std::string bind = json{{"PodName", "p"}, {"Node", "empty"}}.dump();
  const std::string preempt = json{{"Pod", Pod("p", 30, 1000)}}.dump();
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/filter", args}, {"/prioritize", args}, {"/bind", bind}, {"/preempt", preempt}}) {
    auto res = client.Post(path, body, "application/json");
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 500) << path;
    const std::string error = json::parse(res->body)["Error"];
    EXPECT_NE(error.find("internal error"), std::string::npos) << path << ": " << error;
    EXPECT_TRUE(SafeAsFormat(error)) << error;
  }
  auto readyz = client.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 500);
  EXPECT_NE(readyz->body.find("internal error"), std::string::npos) << readyz->body;
  fail = false;
  EXPECT_EQ(client.Post("/filter", args, "application/json")->status, 200);
}

TEST_F(ServerTest, HealthReadinessMetricsAndNodes) {
  ready_ = false;
  EXPECT_EQ(client_->Get("/healthz")->status, 200);
  EXPECT_EQ(client_->Get("/readyz")->status, 503);
  const std::string early = json{{"Pod", Pod("p", 30, 1000)}, {"NodeNames", {"empty"}}}.dump();
  EXPECT_NE(json::parse(client_->Post("/filter", early, "application/json")->body)["Error"], "");
  EXPECT_EQ(client_->Post("/prioritize", early, "application/json")->status, 503);
  ready_ = true;
  EXPECT_EQ(client_->Get("/readyz")->status, 200);
  const std::string body = json{{"Pod", Pod("p", 30, 1000)}, {"NodeNames", {"empty"}}}.dump();
  ASSERT_EQ(client_->Post("/filter", body, "application/json")->status, 200);
  const std::string metrics = client_->Get("/metrics")->body;
  EXPECT_NE(metrics.find("mgpu_extender_requests_total{verb=\"filter\",code=\"200\"} 2"), std::string::npos);
  EXPECT_NE(metrics.find("mgpu_extender_requests_total{verb=\"prioritize\",code=\"503\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("mgpu_extender_request_duration_seconds_count{verb=\"filter\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find(
                "mgpu_extender_card_core_allocated_percent{node=\"full\",card=\"0\",uuid=\"full-gpu0\"} 80"),
            std::string::npos);
  const json nodes = json::parse(client_->Get("/v1/nodes")->body);
  ASSERT_EQ(nodes["nodes"].size(), 3u);
  EXPECT_EQ(nodes["nodes"][1]["name"], "full");
  EXPECT_EQ(nodes["nodes"][1]["cards"][0]["core"], 80);
  EXPECT_EQ(nodes["nodes"][1]["pods"][0]["pod"], "default/big");
}

}  // namespace
}  // namespace mgpu::extender
