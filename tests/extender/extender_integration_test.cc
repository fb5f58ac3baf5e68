// mgpu-scheduler-extender against the fake API server over real HTTP on loopback: bind end to end, rollback,
// a burst of concurrent binds that must never over-commit a card, restart, and watch faults.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "common/codec.h"
#include "common/kube/workload.h"
#include "common/nodes_json.h"
#include "common/test_objects.h"
#include "extender/daemon.h"
#include "extender/server.h"
#include "support/test_certs.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::extender {
namespace {

using namespace testobj;
using mgpu::testing::FakeApiServer;
using mgpu::testing::WaitUntil;
using nlohmann::json;

Config TestConfig() {
  Config config;
  config.extender.listen_address = "127.0.0.1:0";
  config.extender.bind_wait_ms = 3000;
  return config;
}

class ExtenderIntegration : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start().ok()); }

  std::unique_ptr<Daemon> StartDaemon(const Config& config = TestConfig(), bool wait_ready = true) {
    auto daemon = std::make_unique<Daemon>(config);
    kube::ClusterConfig cluster;
    cluster.server = api_.url();
    EXPECT_TRUE(daemon->Start(cluster).ok());
    if (wait_ready) {
      EXPECT_TRUE(WaitUntil([&] { return daemon->Ready(); }));
    }
    return daemon;
  }

  json Post(const Daemon& daemon, const std::string& path, const json& body) {
    httplib::Client client("127.0.0.1", daemon.port());
    client.set_read_timeout(std::chrono::seconds(30));
    auto res = client.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  json StoredPod(const std::string& name) { return api_.Get("pods", "default", name).value_or(json()); }

  const ResourceNames names_ = Config().Names();
  FakeApiServer api_;
};

TEST_F(ExtenderIntegration, BindRecordsCardsBindsAndReportsAnEvent) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 2)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("p", 30, 4096)).ok());
  auto daemon = StartDaemon();
  const json filter = Post(*daemon, "/filter", {{"Pod", StoredPod("p")}, {"NodeNames", {"n1"}}});
  EXPECT_EQ(filter["NodeNames"], json::array({"n1"}));
  const json reply = Post(*daemon, "/bind",
                          {{"PodName", "p"},
                           {"PodNamespace", "default"},
                           {"PodUID", StoredPod("p")["metadata"]["uid"]},
                           {"Node", "n1"}});
  EXPECT_EQ(reply["Error"], "");
  const json pod = StoredPod("p");
  EXPECT_EQ(pod["spec"]["nodeName"], "n1");
  Result<Assignment> a =
      DecodeAssignment(pod["metadata"]["annotations"][names_.gpu_assignment].get<std::string>());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, OneCard("n1-gpu0", 30, 4096));
  EXPECT_TRUE(pod["metadata"]["annotations"].contains(names_.gpu_assume_time));
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n1")->state.cards[0].usage.core, 30);
  // The event is posted off the bind's path.
  EXPECT_TRUE(WaitUntil([&] {
    for (const json& e : api_.List("events", "default"))
      if (e["reason"] == "GPUAssigned" && e["involvedObject"]["name"] == "p") return true;
    return false;
  }));
  // A pod the API server does not know is a scheduling error, not a crash.
  EXPECT_NE(
      Post(*daemon, "/bind",
           {{"PodName", "p"}, {"PodNamespace", "default"}, {"PodUID", "other"}, {"Node", "n1"}})["Error"],
      "");
  EXPECT_NE(
      Post(*daemon, "/bind", {{"PodName", "ghost"}, {"PodNamespace", "default"}, {"Node", "n1"}})["Error"],
      "");
}

// Bind is one API call: the Binding carries the cards (D/gpu-assignment, D/gpu-assume-time), conditional on
// the pod's uid only, so a write to the pod between filter and bind (the scheduler's own status, say) costs
// nothing more.
TEST_F(ExtenderIntegration, BindIsOneCallWithTheCardsOnTheBinding) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 2)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("p", 30, 4096)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("q", 30, 4096)).ok());
  auto daemon = StartDaemon();
  const auto bind = [&](const std::string& name) {
    const size_t before = api_.requests().size();
    const json reply = Post(*daemon, "/bind",
                            {{"PodName", name},
                             {"PodNamespace", "default"},
                             {"PodUID", StoredPod(name)["metadata"]["uid"]},
                             {"Node", "n1"}});
    EXPECT_EQ(reply["Error"], "") << reply.dump();
    std::vector<std::string> calls;
    const auto requests = api_.requests();
    for (size_t i = before; i < requests.size(); ++i)
      if (!requests[i].watch && requests[i].path.find("/pods/" + name) != std::string::npos)
        calls.push_back(requests[i].method + " " + requests[i].path);
    return calls;
  };
  Post(*daemon, "/filter", {{"Pod", StoredPod("p")}, {"NodeNames", {"n1"}}});
  EXPECT_EQ(bind("p"), (std::vector<std::string>{"POST /api/v1/namespaces/default/pods/p/binding"}));
  const json p = StoredPod("p");
  EXPECT_EQ(p["spec"]["nodeName"], "n1");
  EXPECT_EQ(DecodeAssignment(p["metadata"]["annotations"][names_.gpu_assignment].get<std::string>()).value(),
            OneCard("n1-gpu0", 30, 4096));
  EXPECT_TRUE(p["metadata"]["annotations"].contains(names_.gpu_assume_time));
  // The pod changes after filter read it: still one call.
  Post(*daemon, "/filter", {{"Pod", StoredPod("q")}, {"NodeNames", {"n1"}}});
  ASSERT_TRUE(api_.MergePatch("pods", "default", "q", {{"status", {{"conditions", json::array()}}}}).ok());
  EXPECT_EQ(bind("q"), (std::vector<std::string>{"POST /api/v1/namespaces/default/pods/q/binding"}));
  EXPECT_EQ(StoredPod("q")["spec"]["nodeName"], "n1");
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n1")->state.cards[0].usage.core, 60);
}

// choose answers the one node mgpu ranks best (prioritize's highest score; equal scores: kube-scheduler's
// order of the candidates), holds its cards at once so the next choice sees them taken, and the bind takes
// exactly those cards. When no node fits it answers as filter: every node with its reason.
TEST_F(ExtenderIntegration, ChooseAnswersTheBestNodeAloneAndItsBindTakesTheHeldCards) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1, 16384)).ok());
  ASSERT_TRUE(api_.Create("nodes", Node("n2", 1, 16384)).ok());
  ASSERT_TRUE(api_.Create("nodes", Node("n3", 1, 16384)).ok());
  ASSERT_TRUE(api_.Create("pods", Placed(Pod("running", 50, 4096), "n2", names_.gpu_allocated,
                                         OneCard("n2-gpu0", 50, 4096)))
                  .ok());
  ASSERT_TRUE(api_.Create("pods", Pod("a", 30, 4096)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("b", 30, 4096)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("big", 100, 20000)).ok());
  auto daemon = StartDaemon();
  const json nodes = {"n1", "n2", "n3"};
  const json scores = Post(*daemon, "/prioritize", {{"Pod", StoredPod("a")}, {"NodeNames", nodes}});
  std::string best;
  int best_score = -1;
  for (const json& s : scores)
    if (s["Score"].get<int>() > best_score) best = s["Host"], best_score = s["Score"];
  const json chosen = Post(*daemon, "/choose", {{"Pod", StoredPod("a")}, {"NodeNames", nodes}});
  ASSERT_EQ(chosen["NodeNames"], json::array({best})) << chosen.dump() << " " << scores.dump();
  EXPECT_TRUE(chosen.value("FailedNodes", json()).is_null()) << "the smallest answer: nothing else to decode";
  EXPECT_EQ(best, "n2") << "binpack-like policies fill the used card first";
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n2")->state.cards[0].usage.core, 80) << "held before the bind";
  // b no longer fits n2 (80 + 30 > 100): the hold counts.
  const json next = Post(*daemon, "/choose", {{"Pod", StoredPod("b")}, {"NodeNames", nodes}});
  ASSERT_EQ(next["NodeNames"].size(), 1u);
  EXPECT_NE(next["NodeNames"][0], "n2");
  const size_t before = api_.requests().size();
  EXPECT_EQ(Post(*daemon, "/bind",
                 {{"PodName", "a"},
                  {"PodNamespace", "default"},
                  {"PodUID", StoredPod("a")["metadata"]["uid"]},
                  {"Node", "n2"}})["Error"],
            "");
  // Calls on the pod (the GPUAssigned Event is posted apart, from the event queue's thread, whenever it runs).
  int api_calls = 0;
  for (size_t i = before; i < api_.requests().size(); ++i)
    api_calls += !api_.requests()[i].watch && api_.requests()[i].path.find("/pods/a") != std::string::npos;
  EXPECT_EQ(api_calls, 1) << "the Binding alone";
  EXPECT_EQ(
      DecodeAssignment(StoredPod("a")["metadata"]["annotations"][names_.gpu_assignment].get<std::string>())
          .value(),
      OneCard("n2-gpu0", 30, 4096));
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n2")->state.cards[0].usage.core, 80) << "counted once";
  // More memory than any card has fits nowhere: every node with its reason, in kube-scheduler's words, the
  // same for every node that fails for the same cause (kube-scheduler counts them: "3 no mgpu card ...").
  const json none = Post(*daemon, "/choose", {{"Pod", StoredPod("big")}, {"NodeNames", nodes}});
  EXPECT_TRUE(none.value("NodeNames", json()).is_null() || none["NodeNames"].empty()) << none.dump();
  ASSERT_EQ(none["FailedNodes"].size(), 3u) << none.dump();
  for (const auto& [node, reason] : none["FailedNodes"].items())
    EXPECT_EQ(reason, "no mgpu card free for 100 percent core and 20000 MiB (larger than any card)") << node;
}

TEST_F(ExtenderIntegration, FailedBindingRollsBackTheCacheAndTheAnnotation) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1)).ok());
  ASSERT_TRUE(api_.Create("pods", Pod("p", 60, 4096)).ok());
  auto daemon = StartDaemon();
  testing::Fault fault;
  fault.method = "POST";
  fault.path_prefix = "/api/v1/namespaces/default/pods/p/binding";
  fault.status = 500;
  api_.InjectFault(fault);
  const json args = {{"PodName", "p"},
                     {"PodNamespace", "default"},
                     {"PodUID", StoredPod("p")["metadata"]["uid"]},
                     {"Node", "n1"}};
  EXPECT_NE(Post(*daemon, "/bind", args)["Error"], "");
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n1")->state.cards[0].usage.core, 0);
  EXPECT_FALSE(
      StoredPod("p")["metadata"].value("annotations", json::object()).contains(names_.gpu_assignment));
  // The scheduler's retry succeeds.
  EXPECT_EQ(Post(*daemon, "/bind", args)["Error"], "");
  EXPECT_EQ(daemon->cache().Snapshot()->Find("n1")->state.cards[0].usage.core, 60);
}

TEST_F(ExtenderIntegration, BurstOfConcurrentBindsNeverOvercommitsAndRestartRebuildsTheView) {
  constexpr int kNodes = 50, kCards = 4, kPods = 1000, kClients = 40;
  constexpr int64_t kMemory = 16000;
  std::mt19937 rng(20261123);
  for (int n = 0; n < kNodes; ++n)
    ASSERT_TRUE(api_.Create("nodes", Node("node-" + std::to_string(n), kCards, kMemory)).ok());
  std::vector<std::pair<std::string, std::string>> binds;  // pod, node
  for (int p = 0; p < kPods; ++p) {
    const std::string name = "pod-" + std::to_string(p);
    const int core = std::uniform_int_distribution<int>(1, 10)(rng) * 5;
    const int64_t memory = std::uniform_int_distribution<int>(1, 16)(rng) * 500;
    ASSERT_TRUE(api_.Create("pods", Pod(name, core, memory)).ok());
    binds.emplace_back(name,
                       "node-" + std::to_string(std::uniform_int_distribution<int>(0, kNodes - 1)(rng)));
  }
  auto daemon = StartDaemon();

  // The device plugins: confirm each bound pod's assignment as its allocation, as the kubelet would.
  std::atomic<bool> stop{false};
  std::thread plugins([&] {
    while (!stop) {
      for (const json& pod : api_.List("pods", "default")) {
        const json annotations = pod["metadata"].value("annotations", json::object());
        if (!pod["spec"].contains("nodeName") || !annotations.contains(names_.gpu_assignment) ||
            annotations.contains(names_.gpu_allocated))
          continue;
        (void)api_.MergePatch(
            "pods", "default", pod["metadata"]["name"],
            {{"metadata", {{"annotations", {{names_.gpu_allocated, annotations[names_.gpu_assignment]}}}}}});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a scan interval, not a synchronisation
    }
  });

  std::atomic<int> next{0}, succeeded{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", daemon->port());
      client.set_read_timeout(std::chrono::seconds(30));
      for (int i = next++; i < kPods; i = next++) {
        const json args = {
            {"PodName", binds[i].first}, {"PodNamespace", "default"}, {"Node", binds[i].second}};
        auto res = client.Post("/bind", args.dump(), "application/json");
        if (res && res->status == 200 && json::parse(res->body)["Error"] == "") ++succeeded;
      }
    });
  }
  for (std::thread& t : clients) t.join();

  // Check every card from the pods as stored, independently of the extender's cache.
  std::map<std::string, std::pair<int, int64_t>> used;  // uuid -> core, memory
  int bound = 0;
  for (const json& pod : api_.List("pods", "default")) {
    if (!pod["spec"].contains("nodeName")) continue;
    ++bound;
    const json annotations = pod["metadata"]["annotations"];
    Result<Assignment> a = DecodeAssignment(annotations[names_.gpu_assignment].get<std::string>());
    ASSERT_TRUE(a.ok()) << a.message();
    for (const ContainerAssignment& c : a->containers) {
      for (const CardShare& s : c.cards) {
        EXPECT_EQ(s.uuid.rfind(pod["spec"]["nodeName"].get<std::string>() + "-gpu", 0), 0u) << s.uuid;
        used[s.uuid].first += s.core;
        used[s.uuid].second += s.memory_mib;
      }
    }
  }
  EXPECT_EQ(bound, succeeded.load());
  EXPECT_GT(succeeded.load(), kPods / 2);
  std::printf("%d of %d binds succeeded on %zu cards\n", succeeded.load(), kPods, used.size());
  for (const auto& [uuid, u] : used) {
    EXPECT_LE(u.first, 100) << uuid;
    EXPECT_LE(u.second, kMemory) << uuid;
  }

  // Once every bound pod is allocated, a restarted extender sees the same cards.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& pod : api_.List("pods", "default"))
          if (pod["spec"].contains("nodeName") &&
              !pod["metadata"]["annotations"].contains(names_.gpu_allocated))
            return false;
        return true;
      },
      std::chrono::seconds(30)));
  stop = true;
  plugins.join();
  // A range-for over a temporary's member (or the views of a snapshot not held) reads freed memory.
  const auto cards_of = [](Daemon& d) {
    json out = json::object();
    const json nodes = NodesJson(d.cache().Snapshot()->Nodes());
    for (const json& node : nodes["nodes"]) out[node["name"].get<std::string>()] = node["cards"];
    return out;
  };
  ASSERT_TRUE(WaitUntil([&] {
    const std::shared_ptr<const ClusterView> view_of_all = daemon->cache().Snapshot();
    for (const NodeView* view : view_of_all->Nodes())
      for (const PlacedPod& p : view->pods)
        if (!p.allocated) return false;
    return true;
  }));
  const json before = cards_of(*daemon);
  daemon->Stop();
  daemon.reset();
  auto restarted = StartDaemon();
  EXPECT_EQ(cards_of(*restarted), before);
}

TEST_F(ExtenderIntegration, WatchFaultsAreRecovered) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1)).ok());
  auto daemon = StartDaemon();
  const auto core = [&] {
    auto view = daemon->cache().Snapshot();
    return view->Find("n1") ? view->Find("n1")->state.cards[0].usage.core : -1;
  };
  api_.DropWatches();
  ASSERT_TRUE(
      api_.Create("pods", Placed(Pod("a", 20, 100), "n1", names_.gpu_allocated, OneCard("n1-gpu0", 20, 100)))
          .ok());
  EXPECT_TRUE(WaitUntil([&] { return core() == 20; }));
  api_.Compact();
  api_.DropWatches();
  ASSERT_TRUE(
      api_.Create("pods", Placed(Pod("b", 30, 100), "n1", names_.gpu_allocated, OneCard("n1-gpu0", 30, 100)))
          .ok());
  ASSERT_TRUE(api_.Delete("pods", "default", "a").ok());
  EXPECT_TRUE(WaitUntil([&] { return core() == 30; }));
  ASSERT_TRUE(api_.Create("nodes", Node("n2", 2)).ok());
  EXPECT_TRUE(WaitUntil([&] { return daemon->cache().Snapshot()->Find("n2") != nullptr; }));
}

TEST_F(ExtenderIntegration, LeaderFailoverBindsNothingTwice) {
  // Ten pods that together fill one card exactly (one card, so the ambiguity guard never waits).
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 1)).ok());
  constexpr int kPods = 10;
  for (int i = 0; i < kPods; ++i)
    ASSERT_TRUE(api_.Create("pods", Pod("p" + std::to_string(i), 10, 1000)).ok());
  Config config = TestConfig();
  config.extender.leader_election = true;
  config.extender.lease_namespace = "default";
  config.extender.lease_duration_seconds = 2;
  auto a = StartDaemon(config, false);
  auto b = StartDaemon(config, false);
  ASSERT_TRUE(WaitUntil([&] { return a->Ready() != b->Ready() && a->Leader() != b->Leader(); }));
  if (b->Leader()) std::swap(a, b);
  const auto bind = [&](Daemon& d, int i) {
    return Post(d, "/bind",
                {{"PodName", "p" + std::to_string(i)}, {"PodNamespace", "default"}, {"Node", "n1"}})["Error"];
  };
  EXPECT_NE(bind(*b, 0), "");  // a follower binds nothing
  EXPECT_FALSE(StoredPod("p0")["spec"].contains("nodeName"));
  for (int i = 0; i < kPods / 2; ++i) EXPECT_EQ(bind(*a, i), "") << i;
  a->Stop();  // releases the lease
  ASSERT_TRUE(WaitUntil([&] { return b->Ready(); }));
  // The new leader's cache holds the old leader's binds before it answers.
  ASSERT_TRUE(WaitUntil([&] {
    auto view = b->cache().Snapshot();
    return view->Find("n1") && view->Find("n1")->pods.size() == kPods / 2;
  }));
  const json before = StoredPod("p0")["metadata"]["annotations"];
  EXPECT_NE(bind(*b, 0), "");  // already bound: refused, its cards untouched
  EXPECT_EQ(StoredPod("p0")["metadata"]["annotations"], before);
  for (int i = kPods / 2; i < kPods; ++i) EXPECT_EQ(bind(*b, i), "") << i;
  int bindings = 0;
  for (const testing::RecordedRequest& r : api_.requests())
    bindings += r.method == "POST" && r.path.ends_with("/binding");
  EXPECT_EQ(bindings, kPods);
  std::map<std::string, int> core;
  for (const json& pod : api_.List("pods", "default")) {
    Result<Assignment> assignment =
        DecodeAssignment(pod["metadata"]["annotations"][names_.gpu_assignment].get<std::string>());
    ASSERT_TRUE(assignment.ok());
    core[assignment->containers[0].cards[0].uuid] += assignment->containers[0].cards[0].core;
  }
  for (const auto& [uuid, c] : core) EXPECT_LE(c, 100) << uuid;
}

// A pod whose fields have the wrong types or unreadable values, read by bind itself (no filter before it on
// this replica): each bind answers 200 with one sentence (or binds), never a 500, and no '%' reaches
// kube-scheduler even when the pod's own text holds one.
TEST_F(ExtenderIntegration, BindOnAMalformedPodAnswersOneSentence) {
  ASSERT_TRUE(api_.Create("nodes", Node("n1", 8)).ok());
  struct Case {
    std::string name;
    bool refused;
    std::function<void(json&)> spoil;
  };
  const auto limits = [](json& p) -> json& { return p["spec"]["containers"][0]["resources"]["limits"]; };
  const std::vector<Case> cases = {
      {"count-percent", true, [&](json& p) { p["metadata"]["annotations"][names_.gpu_count] = "50%"; }},
      {"qos-percent", true,
       [&](json& p) { p["metadata"]["annotations"][std::string(kQosLevelAnnotation)] = "%s%n"; }},
      {"memory-percent", true, [&](json& p) { limits(p)[names_.memory] = "4%d"; }},
      {"count-huge", true, [&](json& p) { p["metadata"]["annotations"][names_.gpu_count] = "1e400"; }},
      {"quantity-object", true,
       [&](json& p) {
         limits(p)[names_.core] = {{"a", 1}};
       }},
      {"quantity-unit", true, [&](json& p) { limits(p)[names_.memory] = "12Qi"; }},
      {"quantity-float", true, [&](json& p) { limits(p)[names_.core] = 30.5; }},
      {"quantity-huge", true, [&](json& p) { limits(p)[names_.memory] = "9Ei"; }},
      {"containers-object", true,
       [&](json& p) {
         p["spec"]["containers"] = {{"a", 1}};
       }},
      {"annotation-number", false, [&](json& p) { p["metadata"]["annotations"][names_.gpu_count] = 2; }},
      {"annotations-list", false,
       [&](json& p) {
         p["metadata"]["annotations"] = json::array({1, 2});
       }},
      {"cpu-huge", false, [&](json& p) { limits(p)["cpu"] = "9223372036854775807"; }},
      {"container-string", false, [&](json& p) { p["spec"]["containers"].push_back("c2"); }},
      {"resources-string", false, [&](json& p) { p["spec"]["containers"][0]["resources"] = "all"; }},
      {"uid-number", false, [&](json& p) { p["metadata"]["uid"] = 7; }},
      {"spec-list", false, [&](json& p) { p["spec"] = json::array(); }},
      {"owner-odd", false,
       [&](json& p) {
         p["metadata"]["ownerReferences"] = json::array({{{"controller", true}, {"kind", 3}, {"name", {1}}}});
       }},
      {"selector-list", false, [&](json& p) { p["spec"]["nodeSelector"] = json::array({"x"}); }},
      {"affinity-odd", false,
       [&](json& p) {
         p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
             {"nodeSelectorTerms", {1, "x", nullptr}}};
       }},
  };
  auto daemon = StartDaemon();
  for (const Case& c : cases) {
    json pod = Pod(c.name, 10, 1024);
    c.spoil(pod);
    api_.StoreRaw("pods", "default/" + c.name, pod);
    const json reply =
        Post(*daemon, "/bind", {{"PodName", c.name}, {"PodNamespace", "default"}, {"Node", "n1"}});
    ASSERT_TRUE(reply.is_object() && reply["Error"].is_string()) << c.name;
    const std::string error = reply["Error"];
    EXPECT_EQ(!error.empty(), c.refused) << c.name << ": " << error;
    EXPECT_EQ(error.find('%'), std::string::npos) << c.name << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << c.name << ": " << error;
  }
}

TEST_F(ExtenderIntegration, ServesTlsWithTheConfiguredCertificate) {
  testing::TempDir dir;
  Result<testing::TestCerts> certs = testing::GenerateTestCerts(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.message();
  Config config = TestConfig();
  config.extender.tls_cert_file = certs->server_cert;
  config.extender.tls_key_file = certs->server_key;
  auto daemon = StartDaemon(config);
  httplib::SSLClient client("127.0.0.1", daemon->port());
  client.enable_server_certificate_verification(false);
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// The admission webhook as the API server calls it: over TLS, reading a pod's Deployment through its
// ReplicaSet from the API server (a key the pod lacks comes from there, as in the filter).
TEST_F(ExtenderIntegration, ValidatesPodsOverTlsWithTheirDeploymentsAnnotations) {
  testing::TempDir dir;
  Result<testing::TestCerts> certs = testing::GenerateTestCerts(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.message();
  const auto owner = [](const char* kind, const char* name) {
    return json::array({{{"apiVersion", "apps/v1"}, {"kind", kind}, {"name", name}, {"controller", true}}});
  };
  ASSERT_TRUE(
      api_.Create(
              "deployments",
              {{"apiVersion", "apps/v1"},
               {"kind", "Deployment"},
               {"metadata",
                {{"name", "wide"}, {"namespace", "default"}, {"annotations", {{names_.gpu_count, "3"}}}}}})
          .ok());
  ASSERT_TRUE(api_.Create("replicasets", {{"apiVersion", "apps/v1"},
                                          {"kind", "ReplicaSet"},
                                          {"metadata",
                                           {{"name", "wide-1"},
                                            {"namespace", "default"},
                                            {"ownerReferences", owner("Deployment", "wide")}}}})
                  .ok());
  Config config = TestConfig();
  config.extender.tls_cert_file = certs->server_cert;
  config.extender.tls_key_file = certs->server_key;
  auto daemon = StartDaemon(config);
  httplib::SSLClient client("127.0.0.1", daemon->port());
  client.set_ca_cert_path(certs->ca_cert.c_str());
  const auto allowed = [&](const json& pod) {
    const json review = {{"apiVersion", "admission.k8s.io/v1"},
                         {"kind", "AdmissionReview"},
                         {"request",
                          {{"uid", "u-1"},
                           {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                           {"namespace", "default"},
                           {"operation", "CREATE"},
                           {"object", pod}}}};
    auto res = client.Post("/validate", review.dump(), "application/json");
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    if (!res) return json();
    EXPECT_EQ(res->status, 200);
    return json::parse(res->body)["response"]["allowed"];
  };
  json pod = Pod("wide-1-x", 150, 3072);
  EXPECT_EQ(allowed(pod), false) << "150 percent on one card";
  pod["metadata"]["ownerReferences"] = owner("ReplicaSet", "wide-1");
  EXPECT_EQ(allowed(pod), true) << "50 percent on each of the Deployment's 3 cards";
}

}  // namespace
}  // namespace mgpu::extender

namespace mgpu::extender {
namespace {

// A Deployment's annotations reach its pods through the ReplicaSet, are read once per workload, and an edit
// is seen once the remembered copy is older than the TTL.
TEST(WorkloadResolverTest, ReadsTheDeploymentThroughItsReplicaSetAndRefreshesAfterTheTtl) {
  FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  const std::string qos(kQosLevelAnnotation);
  json deployment = {
      {"apiVersion", "apps/v1"},
      {"kind", "Deployment"},
      {"metadata", {{"name", "web"}, {"namespace", "default"}, {"annotations", {{qos, "shared_cores"}}}}}};
  ASSERT_TRUE(api.Create("deployments", deployment).ok());
  const json owner = [](const char* kind, const char* name) {
    return json::array({{{"apiVersion", "apps/v1"}, {"kind", kind}, {"name", name}, {"controller", true}}});
  }("Deployment", "web");
  ASSERT_TRUE(
      api.Create("replicasets",
                 {{"apiVersion", "apps/v1"},
                  {"kind", "ReplicaSet"},
                  {"metadata", {{"name", "web-1"}, {"namespace", "default"}, {"ownerReferences", owner}}}})
          .ok());
  json pod = {{"metadata",
               {{"name", "web-1-a"},
                {"namespace", "default"},
                {"ownerReferences", json::array({{{"apiVersion", "apps/v1"},
                                                  {"kind", "ReplicaSet"},
                                                  {"name", "web-1"},
                                                  {"controller", true}}})}}}};
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  auto client = kube::Client::Create(cluster);
  ASSERT_TRUE(client.ok()) << client.message();
  std::chrono::steady_clock::time_point now{};
  kube::WorkloadResolver resolver(client->get(), std::chrono::seconds(60), [&] { return now; });
  EXPECT_EQ(resolver.Resolve(pod).at(qos), "shared_cores");
  ASSERT_TRUE(api.MergePatch("deployments", "default", "web",
                             {{"metadata", {{"annotations", {{qos, "reclaimed_cores"}}}}}})
                  .ok());
  const size_t reads = api.requests().size();
  now += std::chrono::seconds(59);
  EXPECT_EQ(resolver.Resolve(pod).at(qos), "shared_cores");  // remembered: no request
  EXPECT_EQ(api.requests().size(), reads);
  now += std::chrono::seconds(1);
  EXPECT_EQ(resolver.Resolve(pod).at(qos), "reclaimed_cores");
}

// A request path reads a pod with the workload's annotations another thread resolved, waiting for that
// thread when they were never read, and never calls the API server itself.
TEST(WorkloadResolverTest, ARequestPathReadsWhatTheInformerResolvedWithoutCallingTheApiServer) {
  FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  const std::string policy = Config().Names().compute_policy;
  ASSERT_TRUE(api.Create("statefulsets", {{"apiVersion", "apps/v1"},
                                          {"kind", "StatefulSet"},
                                          {"metadata",
                                           {{"name", "db"},
                                            {"namespace", "default"},
                                            {"annotations", {{policy, "guaranteed-burst-share"}}}}}})
                  .ok());
  json pod = Pod("db-0", 0, 1000);
  pod["spec"]["containers"][0]["resources"]["limits"] = {{Config().Names().reclaimed_core, "20"},
                                                         {Config().Names().memory, "1000"}};
  pod["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "apps/v1"}, {"kind", "StatefulSet"}, {"name", "db"}, {"controller", true}}});
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  auto client = kube::Client::Create(cluster);
  ASSERT_TRUE(client.ok()) << client.message();
  kube::WorkloadResolver resolver(client->get());
  const Config config;
  EXPECT_FALSE(resolver.Known(pod).has_value());
  // Nobody resolves it: the request path waits out its bound and reads the pod without the annotations.
  const size_t before = api.requests().size();
  const PodFacts alone = resolver.ReadKnown(pod, config, std::chrono::milliseconds(10));
  EXPECT_EQ(api.requests().size(), before);
  ASSERT_TRUE(alone.request.ok()) << alone.request.message();
  EXPECT_EQ(alone.request->compute_policy, ComputePolicy::kFixedShare);  // the default
  // The informer's thread resolves it while the request path waits.
  std::thread informer([&] { (void)resolver.Read(pod, config); });
  const PodFacts waited = resolver.ReadKnown(pod, config, std::chrono::seconds(30));
  informer.join();
  ASSERT_TRUE(resolver.Known(pod).has_value());
  ASSERT_TRUE(waited.request.ok());
  EXPECT_EQ(waited.request->compute_policy, ComputePolicy::kGuaranteedBurstShare);
  const size_t after = api.requests().size();
  const PodFacts known = resolver.ReadKnown(pod, config, std::chrono::seconds(30));
  EXPECT_EQ(api.requests().size(), after);
  ASSERT_TRUE(known.request.ok());
  EXPECT_EQ(known.request->compute_policy, ComputePolicy::kGuaranteedBurstShare);
}

}  // namespace
}  // namespace mgpu::extender
