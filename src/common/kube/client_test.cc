#include "common/kube/client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/test_certs.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::kube {
namespace {

using mgpu::testing::FakeApiServer;
using mgpu::testing::FakeApiServerOptions;
using mgpu::testing::Fault;
using mgpu::testing::RecordedRequest;
using mgpu::testing::TempDir;
using mgpu::testing::WaitUntil;

Json Pod(const std::string& name, const std::string& ns = "default", const std::string& node = "",
         Json labels = Json::object()) {
  Json pod = {{"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

Json Node(const std::string& name, Json labels = Json::object()) {
  return {{"metadata", {{"name", name}, {"labels", labels}}}};
}

std::vector<std::string> Names(const Json& list) {
  std::vector<std::string> names;
  for (const Json& item : list["items"]) names.push_back(MetadataString(item, "name"));
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Client> MustClient(ClusterConfig config, ClientOptions options = {}) {
  auto client = Client::Create(std::move(config), options);
  EXPECT_TRUE(client.ok()) << (client.ok() ? "" : client.message());
  return client.ok() ? std::move(client.value()) : nullptr;
}

// A credential plugin: prints <dir>/answer.json, counts its runs in <dir>/runs, keeps what it was given.
struct FakePlugin {
  explicit FakePlugin(const TempDir& dir) : dir(dir) {
    command = dir.Write("plugin.sh",
                        "#!/bin/sh\n"
                        "d=$(dirname \"$0\")\n"
                        "echo run >> \"$d/runs\"\n"
                        "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$d/info\"\n"
                        "printf '%s %s' \"$1\" \"$PLUGIN_REGION\" > \"$d/args\"\n"
                        "cat \"$d/answer.json\"\n");
    std::filesystem::permissions(command, std::filesystem::perms::owner_all);
  }
  void Answer(Json status, const std::string& api_version = "client.authentication.k8s.io/v1") const {
    dir.Write("answer.json",
              Json{{"apiVersion", api_version}, {"kind", "ExecCredential"}, {"status", status}}.dump());
  }
  size_t Runs() const {
    std::ifstream in(dir.path() + "/runs");
    size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir.path() + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ExecPlugin Plugin() const {
    return {"client.authentication.k8s.io/v1", command, {"--cluster"}, {{"PLUGIN_REGION", "eu-1"}}};
  }
  const TempDir& dir;
  std::string command;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions options;
    options.token = "secret";
    fake_ = std::make_unique<FakeApiServer>(options);
    ASSERT_TRUE(fake_->Start().ok());
    ClusterConfig config;
    config.server = fake_->url();
    config.token = "secret";
    ClientOptions client_options;
    client_options.request_timeout = std::chrono::milliseconds(2000);
    client_options.max_retry_wait = std::chrono::milliseconds(10);
    client_ = MustClient(config, client_options);
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    client_.reset();
    fake_->Stop();
  }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<Client> client_;
};

TEST(JsonPath, FindsNestedFieldsAndToleratesAnyShape) {
  const Json pod = {{"status", {{"phase", "Running"}, {"count", 3}}}, {"spec", Json::array()}};
  EXPECT_EQ(StringAt(pod, {"status", "phase"}), "Running");
  EXPECT_EQ(StringAt(pod, {"status", "count"}), "");
  EXPECT_EQ(StringAt(pod, {"spec", "nodeName"}), "");
  EXPECT_EQ(StringAt(Json("text"), {"status"}), "");
  ASSERT_NE(FindPath(pod, {"status", "count"}), nullptr);
  EXPECT_EQ(*FindPath(pod, {"status", "count"}), 3);
  EXPECT_EQ(FindPath(pod, {"status", "phase", "deeper"}), nullptr);
  EXPECT_EQ(FindPath(pod, {}), &pod);
}

// An httplib server on a loopback port for one test: the test's handlers, registered before Start(). A
// derived server whose handlers use its own members calls Stop() in its destructor.
class LoopbackServer {
 public:
  ~LoopbackServer() { Stop(); }
  void Start() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { server_.listen_after_bind(); });
  }
  void Stop() {
    if (!serving_.joinable()) return;
    server_.stop();
    serving_.join();
  }
  ClusterConfig Config() const {
    ClusterConfig config;
    config.server = "http://127.0.0.1:" + std::to_string(port_);
    return config;
  }

 protected:
  httplib::Server server_;

 private:
  int port_ = 0;
  std::thread serving_;
};

// An API server that holds each GET of a node until Open() (or Open(its name)), counting the requests in it
// and noting the client port each node's GET came from (bounds of 10 s on a failing run). It closes each
// connection after one request unless `keep_alive` (its threads then wait on the kept connections when it
// stops, until the client closes them).
class HoldingServer : public LoopbackServer {
 public:
  explicit HoldingServer(int threads, bool keep_alive = false) {
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    if (!keep_alive) server_.set_keep_alive_max_count(1);
    server_.Get(R"(/api/v1/nodes/(.*))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      std::unique_lock lock(mu_);
      port_of_[name] = req.remote_port;
      most_ = std::max(most_, ++in_);
      arrived_.notify_all();
      arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return open_ || opened_.contains(name); });
      --in_;
      res.set_content(R"({"kind":"Node","metadata":{"name":"n1"}})", "application/json");
    });
    Start();
  }
  ~HoldingServer() {
    Open();
    Stop();
  }
  // Until more than `n` requests are in it.
  void WaitForMoreThan(int n) {
    std::unique_lock lock(mu_);
    arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return in_ > n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    arrived_.notify_all();
  }
  void Open(const std::string& name) {
    std::lock_guard lock(mu_);
    opened_.insert(name);
    arrived_.notify_all();
  }
  int most() {
    std::lock_guard lock(mu_);
    return most_;
  }
  int PortOf(const std::string& name) {
    std::lock_guard lock(mu_);
    return port_of_[name];
  }

 private:
  std::mutex mu_;
  std::condition_variable arrived_;
  int in_ = 0, most_ = 0;
  bool open_ = false;
  std::set<std::string> opened_;
  std::map<std::string, int> port_of_;
};

// GETs of node n1 on `client` at once, `count` of them, each of the first `in_server` started once the one
// before is in `server` (httplib listens with a backlog of 5); runs `while_held`, then lets them all go.
// Returns how many succeeded.
int HeldGets(HoldingServer& server, Client& client, int count, int in_server,
             const std::function<void()>& while_held = {}) {
  std::atomic<int> ok{0};
  std::vector<std::thread> gets;
  for (int i = 0; i < count; ++i) {
    gets.emplace_back([&] { ok += client.Get(kNodes, "", "n1").ok(); });
    if (i < in_server) server.WaitForMoreThan(i);
  }
  if (while_held) while_held();
  server.Open();
  for (std::thread& t : gets) t.join();
  return ok.load();
}

// A burst of concurrent requests holds at most kMaxHandles handles, each with its connection, at once: the
// rest wait for one rather than open more; once it is over, those connections stay open for the next. The
// server holds what it gets until kMaxHandles requests are in it and the others wait in the client.
TEST(ClientPool, AtMostItsBoundOfConnectionsAtOnceAndKeptAfterABurst) {
  constexpr int kBurst = 40;
  constexpr int kMax = static_cast<int>(Client::kMaxHandles);
  HoldingServer server(kBurst + 4);
  ClientOptions options;
  options.request_timeout = std::chrono::milliseconds(30000);
  std::unique_ptr<Client> client = MustClient(server.Config(), options);
  ASSERT_NE(client, nullptr);
  const int ok = HeldGets(server, *client, kBurst, kMax, [&] {
    EXPECT_TRUE(WaitUntil([&] { return client->WaitingForHandle() == kBurst - kMax; }))
        << client->WaitingForHandle() << " requests waiting for a handle";
  });
  EXPECT_EQ(ok, kBurst);
  EXPECT_EQ(server.most(), kMax);
  EXPECT_EQ(client->IdleHandles(), Client::kMaxHandles);
  EXPECT_EQ(client->CloseIdleHandles(), 0u);  // none idle for idle_connection_timeout (90 s) yet
  EXPECT_EQ(client->IdleHandles(), Client::kMaxHandles);
}

// A kept handle found idle when another is released is closed there, and counted as those CloseIdleHandles
// closes are: the extender hands freed memory back after either (a burst's connections may close on the
// leader's next renewal rather than in its trimmer). Two requests are held in the server together, so that
// the second release finds the first's handle kept.
TEST(ClientPool, AnIdleHandleClosedOnAReleaseIsCounted) {
  HoldingServer server(4);
  ClientOptions options;
  options.idle_connection_timeout = std::chrono::milliseconds(0);
  std::unique_ptr<Client> client = MustClient(server.Config(), options);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(HeldGets(server, *client, 2, 2), 2);
  EXPECT_EQ(client->ClosedHandles(), 1u);  // the second release closed the first's handle
  EXPECT_EQ(client->IdleHandles(), 1u);
  EXPECT_EQ(client->CloseIdleHandles(), 1u);
  EXPECT_EQ(client->ClosedHandles(), 2u);
}

// Of the kept handles a request takes the one opened first, not the one released last: after a burst the
// connections the burst opened are the ones left idle and closed, and the one kept is the one made while it
// was quiet. Two requests are held together (two connections); the first opened is released first.
TEST(ClientPool, ARequestTakesTheKeptHandleOpenedFirst) {
  HoldingServer server(4, /*keep_alive=*/true);
  std::unique_ptr<Client> client = MustClient(server.Config());
  ASSERT_NE(client, nullptr);
  std::thread first([&] { EXPECT_TRUE(client->Get(kNodes, "", "a").ok()); });
  server.WaitForMoreThan(0);
  std::thread second([&] { EXPECT_TRUE(client->Get(kNodes, "", "b").ok()); });
  server.WaitForMoreThan(1);
  server.Open("a");
  first.join();
  server.Open("b");
  second.join();  // its handle released last
  server.Open();
  EXPECT_TRUE(client->Get(kNodes, "", "c").ok());
  EXPECT_NE(server.PortOf("a"), server.PortOf("b"));
  EXPECT_EQ(server.PortOf("c"), server.PortOf("a"));
}

// An API server whose every watch of nodes sends one bookmark and ends, as a real one does on timeoutSeconds,
// keeping the connection; it records the client port each watch came from (one per connection).
class EndingWatchServer : public LoopbackServer {
 public:
  EndingWatchServer() {
    server_.Get("/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        ports_.push_back(req.remote_port);
      }
      res.set_content(R"({"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"5"}}})"
                      "\n",
                      "application/json");
    });
    Start();
  }
  ~EndingWatchServer() { Stop(); }
  std::vector<int> ports() {
    std::lock_guard lock(mu_);
    return ports_;
  }

 private:
  std::mutex mu_;
  std::vector<int> ports_;
};

// A watch the server ended leaves its connection to the next one, until it has been idle for the timeout:
// an informer resuming its watch does not open a connection (and make its TLS state) again.
TEST(ClientWatchConnection, TheNextWatchTakesTheLastOnesConnectionUntilItIsIdle) {
  EndingWatchServer server;
  ClientOptions options;
  options.idle_connection_timeout = std::chrono::milliseconds(0);
  std::unique_ptr<Client> client = MustClient(server.Config(), options);
  ASSERT_NE(client, nullptr);
  auto watch = [&] {
    int bookmarks = 0;
    ApiResult ended = client->Watch(kNodes, "", {}, [&](const WatchEvent& event) {
      bookmarks += event.type == "BOOKMARK";
      return true;
    });
    return ended.ok() && bookmarks == 1;
  };
  ASSERT_TRUE(watch());
  EXPECT_EQ(client->IdleWatchHandles(), 1u);
  ASSERT_TRUE(watch());
  EXPECT_EQ(client->ClosedHandles(), 0u);
  EXPECT_EQ(client->CloseIdleHandles(), 1u);  // idle past the timeout (0): closed, and counted
  EXPECT_EQ(client->IdleWatchHandles(), 0u);
  EXPECT_EQ(client->ClosedHandles(), 1u);
  ASSERT_TRUE(watch());
  std::vector<int> ports = server.ports();
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[1], ports[0]);  // the same connection
  EXPECT_NE(ports[2], ports[1]);  // a new one
}

// A watch the handler stopped, mid-stream, leaves nothing kept: its connection may still carry the rest.
TEST(ClientWatchConnection, AStoppedWatchKeepsNoHandle) {
  EndingWatchServer server;
  std::unique_ptr<Client> client = MustClient(server.Config(), {});
  ASSERT_NE(client, nullptr);
  ApiResult stopped = client->Watch(kNodes, "", {}, [](const WatchEvent&) { return false; });
  EXPECT_TRUE(stopped.ok()) << stopped.message();
  EXPECT_EQ(client->IdleWatchHandles(), 0u);
}

TEST_F(ClientTest, AConnectionIdlePastItsTimeoutIsClosed) {
  ClusterConfig config;
  config.server = fake_->url();
  config.token = "secret";
  ClientOptions options;
  options.idle_connection_timeout = std::chrono::milliseconds(0);
  std::unique_ptr<Client> client = MustClient(config, options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(fake_->Create("nodes", Node("node-a")).ok());
  ASSERT_TRUE(client->GetNode("node-a").ok());
  EXPECT_EQ(client->IdleHandles(), 1u);  // kept until it has been unused for the timeout
  EXPECT_EQ(client->ClosedHandles(), 0u);
  EXPECT_EQ(client->CloseIdleHandles(), 1u);
  EXPECT_EQ(client->IdleHandles(), 0u);
  EXPECT_EQ(client->ClosedHandles(), 1u);
  EXPECT_TRUE(client->GetNode("node-a").ok());  // a new connection
}

TEST_F(ClientTest, GetAndListNodes) {
  ASSERT_TRUE(fake_->Create("nodes", Node("node-a", {{"gpu", "true"}})).ok());
  ASSERT_TRUE(fake_->Create("nodes", Node("node-b")).ok());
  auto node = client_->GetNode("node-a");
  ASSERT_TRUE(node.ok()) << node.message();
  EXPECT_EQ(MetadataString(*node, "name"), "node-a");
  EXPECT_EQ((*node)["kind"], "Node");
  auto all = client_->ListNodes();
  ASSERT_TRUE(all.ok()) << all.message();
  EXPECT_EQ(Names(*all), (std::vector<std::string>{"node-a", "node-b"}));
  EXPECT_EQ(MetadataString(*all, "resourceVersion"), std::to_string(fake_->resource_version()));
  auto gpu = client_->ListNodes({.label_selector = "gpu=true"});
  ASSERT_TRUE(gpu.ok()) << gpu.message();
  EXPECT_EQ(Names(*gpu), (std::vector<std::string>{"node-a"}));
}

TEST_F(ClientTest, ListPodsWithSelectorsAcrossNamespaces) {
  ASSERT_TRUE(fake_->Create("pods", Pod("a", "default", "node-1", {{"app", "x"}})).ok());
  ASSERT_TRUE(fake_->Create("pods", Pod("b", "team", "node-1", {{"app", "y"}})).ok());
  ASSERT_TRUE(fake_->Create("pods", Pod("c", "team", "node-2", {{"app", "x"}})).ok());
  ASSERT_TRUE(fake_->Create("pods", Pod("d", "team")).ok());
  auto on_node = client_->ListPods("", {.field_selector = "spec.nodeName=node-1"});
  ASSERT_TRUE(on_node.ok()) << on_node.message();
  EXPECT_EQ(Names(*on_node), (std::vector<std::string>{"a", "b"}));
  auto team = client_->ListPods("team");
  ASSERT_TRUE(team.ok());
  EXPECT_EQ(Names(*team), (std::vector<std::string>{"b", "c", "d"}));
  auto x_in_team = client_->ListPods("team", {.label_selector = "app in (x,z)"});
  ASSERT_TRUE(x_in_team.ok());
  EXPECT_EQ(Names(*x_in_team), (std::vector<std::string>{"c"}));
  auto unscheduled = client_->ListPods("", {.field_selector = "spec.nodeName="});
  ASSERT_TRUE(unscheduled.ok());
  EXPECT_EQ(Names(*unscheduled), (std::vector<std::string>{"d"}));
  auto bad = client_->ListPods("", {.label_selector = "app in (x"});
  EXPECT_EQ(bad.http_status(), 400);
}

TEST_F(ClientTest, NotFoundCarriesStatusAndMessage) {
  auto pod = client_->GetPod("default", "missing");
  ASSERT_FALSE(pod.ok());
  EXPECT_TRUE(pod.IsNotFound());
  EXPECT_EQ(pod.reason(), "NotFound");
  EXPECT_NE(pod.message().find("pods \"missing\" not found"), std::string::npos) << pod.message();
  EXPECT_NE(pod.message().find("/api/v1/namespaces/default/pods/missing"), std::string::npos)
      << pod.message();
}

TEST_F(ClientTest, PatchAnnotationsAndLabels) {
  ASSERT_TRUE(fake_->Create("pods", Pod("p", "default", "", {{"keep", "1"}, {"drop", "1"}})).ok());
  MetadataPatch patch;
  patch.annotations["mgpu.io/gpu-assignment"] = "GPU-1";
  patch.labels["drop"] = std::nullopt;
  patch.labels["new"] = "2";
  auto patched = client_->PatchPodMetadata("default", "p", patch);
  ASSERT_TRUE(patched.ok()) << patched.message();
  auto stored = fake_->Get("pods", "default", "p");
  ASSERT_TRUE(stored);
  EXPECT_EQ((*stored)["metadata"]["annotations"]["mgpu.io/gpu-assignment"], "GPU-1");
  EXPECT_EQ((*stored)["metadata"]["labels"], (Json{{"keep", "1"}, {"new", "2"}}));
  EXPECT_EQ(*stored, patched.value());

  ASSERT_TRUE(fake_->Create("nodes", Node("n")).ok());
  MetadataPatch node_patch;
  node_patch.annotations["mgpu.io/inventory"] = "{}";
  ASSERT_TRUE(client_->PatchNodeMetadata("n", node_patch).ok());
  EXPECT_EQ((*fake_->Get("nodes", "", "n"))["metadata"]["annotations"]["mgpu.io/inventory"], "{}");
}

TEST_F(ClientTest, PatchWithStaleResourceVersionIsConflict) {
  auto created = fake_->Create("pods", Pod("p"));
  ASSERT_TRUE(created.ok());
  std::string version = MetadataString(*created, "resourceVersion");
  MetadataPatch first;
  first.annotations["a"] = "1";
  first.resource_version = version;
  ASSERT_TRUE(client_->PatchPodMetadata("default", "p", first).ok());
  MetadataPatch second;
  second.annotations["a"] = "2";
  second.resource_version = version;  // now stale
  auto conflict = client_->PatchPodMetadata("default", "p", second);
  ASSERT_FALSE(conflict.ok());
  EXPECT_TRUE(conflict.IsConflict());
  EXPECT_EQ(conflict.reason(), "Conflict");
  EXPECT_NE(conflict.message().find("the object has been modified"), std::string::npos) << conflict.message();
  EXPECT_EQ((*fake_->Get("pods", "default", "p"))["metadata"]["annotations"]["a"], "1");
}

TEST_F(ClientTest, BindSetsNodeNameOnce) {
  auto created = fake_->Create("pods", Pod("p"));
  ASSERT_TRUE(created.ok());
  auto wrong_uid = client_->BindPod("default", "p", "not-the-uid", "node-a");
  EXPECT_TRUE(wrong_uid.IsConflict());
  auto bound = client_->BindPod("default", "p", MetadataString(*created, "uid"), "node-a");
  ASSERT_TRUE(bound.ok()) << bound.message();
  EXPECT_EQ((*fake_->Get("pods", "default", "p"))["spec"]["nodeName"], "node-a");
  auto again = client_->BindPod("default", "p", "", "node-b");
  EXPECT_TRUE(again.IsConflict()) << again.message();
  EXPECT_TRUE(client_->BindPod("default", "missing", "", "node-a").IsNotFound());
}

TEST_F(ClientTest, RecordEventAboutPodAndNode) {
  auto pod = fake_->Create("pods", Pod("p", "team"));
  ASSERT_TRUE(pod.ok());
  auto event =
      client_->RecordEvent(*pod, "Warning", "FailedBinding", "no card fits", "mgpu-scheduler-extender");
  ASSERT_TRUE(event.ok()) << event.message();
  auto node = fake_->Create("nodes", Node("n"));
  ASSERT_TRUE(client_->RecordEvent(*node, "Normal", "Inventory", "8 cards", "mgpu-device-plugin").ok());
  auto team = fake_->List("events", "team");
  ASSERT_EQ(team.size(), 1u);
  EXPECT_EQ(team[0]["involvedObject"]["name"], "p");
  EXPECT_EQ(team[0]["involvedObject"]["uid"], (*pod)["metadata"]["uid"]);
  EXPECT_EQ(team[0]["reason"], "FailedBinding");
  EXPECT_EQ(team[0]["type"], "Warning");
  EXPECT_EQ(team[0]["source"]["component"], "mgpu-scheduler-extender");
  auto default_ns = fake_->List("events", "default");
  ASSERT_EQ(default_ns.size(), 1u);
  EXPECT_EQ(default_ns[0]["involvedObject"]["kind"], "Node");
}

TEST_F(ClientTest, LeaseLifecycle) {
  EXPECT_TRUE(client_->GetLease("kube-system", "mgpu").IsNotFound());
  Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "mgpu"}, {"namespace", "kube-system"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  auto created = client_->CreateLease("kube-system", lease);
  ASSERT_TRUE(created.ok()) << created.message();
  EXPECT_EQ(client_->CreateLease("kube-system", lease).reason(), "AlreadyExists");
  Json renewed = created.value();
  renewed["spec"]["holderIdentity"] = "b";
  auto updated = client_->UpdateLease("kube-system", renewed);
  ASSERT_TRUE(updated.ok()) << updated.message();
  EXPECT_EQ((*client_->GetLease("kube-system", "mgpu"))["spec"]["holderIdentity"], "b");
  // A second candidate holding the old version loses.
  renewed["spec"]["holderIdentity"] = "c";
  EXPECT_TRUE(client_->UpdateLease("kube-system", renewed).IsConflict());
}

TEST_F(ClientTest, GetOwnerWorkloads) {
  ASSERT_TRUE(fake_->Create("replicasets", {{"metadata", {{"name", "web-1"}, {"namespace", "team"}}}}).ok());
  ASSERT_TRUE(fake_->Create("jobs", {{"metadata", {{"name", "train"}, {"namespace", "team"}}}}).ok());
  auto rs = client_->GetOwner("team", {{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "web-1"}});
  ASSERT_TRUE(rs.ok()) << rs.message();
  EXPECT_EQ((*rs)["kind"], "ReplicaSet");
  auto job = client_->GetOwner("team", {{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", "train"}});
  ASSERT_TRUE(job.ok()) << job.message();
  EXPECT_TRUE(client_->GetOwner("team", {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", "x"}})
                  .IsNotFound());
  auto unknown =
      client_->GetOwner("team", {{"apiVersion", "example.com/v1"}, {"kind", "Thing"}, {"name", "x"}});
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.http_status(), 0);
}

TEST_F(ClientTest, GenericCreateReplaceDelete) {
  auto created = client_->Create(kPods, "team", Pod("p", "team"));
  ASSERT_TRUE(created.ok()) << created.message();
  Json changed = created.value();
  changed["metadata"]["labels"]["x"] = "y";
  auto replaced = client_->Replace(kPods, "team", "p", changed);
  ASSERT_TRUE(replaced.ok()) << replaced.message();
  EXPECT_TRUE(client_->Replace(kPods, "team", "p", changed).IsConflict());  // changed carries the old version
  ASSERT_TRUE(client_->Delete(kPods, "team", "p").ok());
  EXPECT_FALSE(fake_->Get("pods", "team", "p"));
  EXPECT_TRUE(client_->Delete(kPods, "team", "p").IsNotFound());
}

TEST_F(ClientTest, WrongTokenIsUnauthorized) {
  ClusterConfig config;
  config.server = fake_->url();
  config.token = "wrong";
  auto client = MustClient(config);
  auto nodes = client->ListNodes();
  EXPECT_EQ(nodes.http_status(), 401);
}

TEST_F(ClientTest, TokenFileIsReReadWhenItRotates) {
  TempDir dir;
  std::string token_file = dir.Write("token", "secret\n");
  ClusterConfig config;
  config.server = fake_->url();
  config.token_file = token_file;
  auto client = MustClient(config);
  ASSERT_TRUE(client->ListNodes().ok());
  fake_->SetToken("rotated");
  dir.Write("token", "rotated");
  auto after = client->ListNodes();
  EXPECT_TRUE(after.ok()) << after.message();
  auto requests = fake_->requests();
  EXPECT_EQ(requests.back().authorization, "Bearer rotated");
}

TEST_F(ClientTest, ExecPluginSuppliesTheTokenAndRunsAgainWhenItExpiresOrIsRefused) {
  TempDir dir;
  FakePlugin plugin(dir);
  plugin.Answer({{"token", "secret"}});
  auto client = MustClient({.server = fake_->url(), .exec = plugin.Plugin()});
  ASSERT_TRUE(client->ListNodes().ok());
  ASSERT_TRUE(client->ListNodes().ok());
  EXPECT_EQ(plugin.Runs(), 1u);  // no expiry: kept
  EXPECT_EQ(fake_->requests().back().authorization, "Bearer secret");
  EXPECT_EQ(Json::parse(plugin.Read("info")), (Json{{"apiVersion", "client.authentication.k8s.io/v1"},
                                                    {"kind", "ExecCredential"},
                                                    {"spec", {{"interactive", false}}}}));
  EXPECT_EQ(plugin.Read("args"), "--cluster eu-1");
  // Revoked: the server says 401, the plugin runs once more and the request goes through.
  fake_->SetToken("rotated");
  plugin.Answer({{"token", "rotated"}, {"expirationTimestamp", "2000-01-01T00:00:00Z"}});
  auto after = client->ListNodes();
  EXPECT_TRUE(after.ok()) << after.message();
  EXPECT_EQ(plugin.Runs(), 2u);
  // Expired (2000): run before each request.
  ASSERT_TRUE(client->ListNodes().ok());
  EXPECT_EQ(plugin.Runs(), 3u);
  plugin.Answer({{"token", "rotated"}, {"expirationTimestamp", "2099-01-01T00:00:00.5+02:00"}});
  ASSERT_TRUE(client->ListNodes().ok());
  ASSERT_TRUE(client->ListNodes().ok());
  EXPECT_EQ(plugin.Runs(), 4u);
}

TEST_F(ClientTest, BrokenExecPluginsFailTheRequestWithTheReason) {
  TempDir dir;
  FakePlugin plugin(dir);
  const auto failure = [&](const ExecPlugin& p) {
    auto nodes = MustClient({.server = fake_->url(), .exec = p})->ListNodes();
    EXPECT_FALSE(nodes.ok());
    return nodes.message();
  };
  EXPECT_NE(failure({"client.authentication.k8s.io/v1", dir.path() + "/missing", {}, {}})
                .find("cannot run credential plugin"),
            std::string::npos);
  dir.Write("answer.json", "not json");
  EXPECT_NE(failure(plugin.Plugin()).find("did not print an ExecCredential"), std::string::npos);
  plugin.Answer({{"token", "secret"}}, "client.authentication.k8s.io/v1beta1");
  EXPECT_NE(failure(plugin.Plugin()).find("apiVersion"), std::string::npos);
  plugin.Answer(Json::object());
  EXPECT_NE(failure(plugin.Plugin()).find("neither a token nor a client certificate"), std::string::npos);
  plugin.Answer({{"token", "secret"}, {"expirationTimestamp", "tomorrow"}});
  EXPECT_NE(failure(plugin.Plugin()).find("RFC 3339"), std::string::npos);
  ExecPlugin exits = plugin.Plugin();
  exits.command = "false";
  EXPECT_NE(failure(exits).find("exit status 1"), std::string::npos);
}

TEST_F(ClientTest, ListsComeInPagesAndAnExpiredTokenFallsBackToOneAnswer) {
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(fake_->Create("nodes", Node("n" + std::to_string(i))).ok());
  auto client = MustClient({.server = fake_->url(), .token = "secret"}, {.list_page_size = 3});
  auto nodes = client->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.message();
  EXPECT_EQ(Names(*nodes), (std::vector<std::string>{"n0", "n1", "n2", "n3", "n4", "n5", "n6"}));
  EXPECT_EQ(StringAt(*nodes, {"metadata", "continue"}), "");
  const std::string version = StringAt(*nodes, {"metadata", "resourceVersion"});
  EXPECT_FALSE(version.empty());
  const auto requests = fake_->requests();
  ASSERT_EQ(requests.size(), 3u);
  for (const RecordedRequest& r : requests) EXPECT_EQ(r.params.at("limit"), "3");
  EXPECT_EQ(requests[0].params.count("continue"), 0u);
  EXPECT_EQ(requests[2].params.count("continue"), 1u);
  // An expired continue token (the server compacted) gives a whole list in one answer.
  fake_->InjectFault({.action = Fault::Action::kStatus, .with_param = "continue", .status = 410});
  auto whole = client->ListNodes();
  ASSERT_TRUE(whole.ok()) << whole.message();
  EXPECT_EQ(Names(*whole).size(), 7u);
  const auto after = fake_->requests();
  EXPECT_EQ(after.back().params.count("limit"), 0u);
  // Unpaged when asked.
  auto unpaged = MustClient({.server = fake_->url(), .token = "secret"}, {.list_page_size = 0});
  ASSERT_TRUE(unpaged->ListNodes().ok());
  EXPECT_EQ(fake_->requests().back().params.count("limit"), 0u);
  // A probe: one page of at most one, one request.
  const size_t before_probe = fake_->requests().size();
  auto probe = client->ListNodes({.at_most = 1});
  ASSERT_TRUE(probe.ok()) << probe.message();
  EXPECT_EQ(Names(*probe), (std::vector<std::string>{"n0"}));
  EXPECT_EQ(StringAt(*probe, {"metadata", "continue"}), "");
  ASSERT_EQ(fake_->requests().size(), before_probe + 1);
  EXPECT_EQ(fake_->requests().back().params.at("limit"), "1");
}

// The shared fake pages like the real server: later pages come from the first page's snapshot, and
// compaction expires the continue tokens.
TEST(FakeApiServerPages, LaterPagesComeFromTheFirstPagesSnapshotUntilCompaction) {
  FakeApiServer fake;
  ASSERT_TRUE(fake.Start().ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(fake.Create("nodes", Node("n" + std::to_string(i))).ok());
  httplib::Client http(fake.url());
  auto page = http.Get("/api/v1/nodes?limit=2");
  ASSERT_TRUE(page);
  const Json first = Json::parse(page->body);
  const std::string token = StringAt(first, {"metadata", "continue"});
  ASSERT_FALSE(token.empty());
  ASSERT_TRUE(fake.Create("nodes", Node("n9")).ok());
  auto rest = http.Get("/api/v1/nodes?limit=2&continue=" + token);
  ASSERT_TRUE(rest);
  const Json second = Json::parse(rest->body);
  EXPECT_EQ(Names(second), (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(StringAt(second, {"metadata", "resourceVersion"}),
            StringAt(first, {"metadata", "resourceVersion"}));
  auto again = http.Get("/api/v1/nodes?limit=1");
  const std::string token2 = StringAt(Json::parse(again->body), {"metadata", "continue"});
  fake.Compact();
  auto gone = http.Get("/api/v1/nodes?limit=1&continue=" + token2);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 410);
}

TEST_F(ClientTest, ThrottledRequestsAreRetried) {
  ASSERT_TRUE(fake_->Create("nodes", Node("n")).ok());
  fake_->InjectFault(
      {.action = Fault::Action::kStatus, .path_prefix = "/api/v1/nodes", .status = 429, .times = 2});
  auto node = client_->GetNode("n");
  ASSERT_TRUE(node.ok()) << node.message();
  EXPECT_EQ(fake_->requests().size(), 3u);
  fake_->InjectFault({.action = Fault::Action::kStatus, .status = 429, .times = -1});
  auto throttled = client_->GetNode("n");
  EXPECT_EQ(throttled.http_status(), 429);
}

TEST_F(ClientTest, ServerErrorsAndMalformedAnswersAreErrors) {
  ASSERT_TRUE(fake_->Create("nodes", Node("n")).ok());
  fake_->InjectFault({.action = Fault::Action::kStatus, .status = 500});
  auto failed = client_->GetNode("n");
  EXPECT_EQ(failed.http_status(), 500);
  EXPECT_EQ(failed.reason(), "InternalError");
  fake_->InjectFault({.action = Fault::Action::kTruncateBody});
  auto truncated = client_->ListNodes();
  EXPECT_FALSE(truncated.ok());
  EXPECT_TRUE(client_->ListNodes().ok());  // the next request is fine again
}

TEST_F(ClientTest, SlowAnswersTimeOut) {
  ClusterConfig config = client_->config();
  auto client = MustClient(config, {.request_timeout = std::chrono::milliseconds(200)});
  fake_->InjectFault({.action = Fault::Action::kDelay, .delay = std::chrono::seconds(5)});
  auto slow = client->ListNodes();
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.http_status(), 0);
  EXPECT_EQ(slow.reason(), "Timeout");
  EXPECT_TRUE(client->ListNodes().ok());
}

TEST_F(ClientTest, UnreachableServerIsAnError) {
  ClusterConfig config;
  config.server = "http://127.0.0.1:1";
  auto client = MustClient(config);
  auto nodes = client->ListNodes();
  EXPECT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.http_status(), 0);
  EXPECT_FALSE(Client::Create({.server = "ftp://x"}).ok());
  EXPECT_FALSE(Client::Create({.server = "https://x", .ca_file = "/nonexistent/ca.crt"}).ok());
}

TEST_F(ClientTest, WatchStreamsChangesInOrder) {
  auto list = client_->ListPods("default");
  ASSERT_TRUE(list.ok());
  std::string version = MetadataString(*list, "resourceVersion");
  ASSERT_TRUE(fake_->Create("pods", Pod("p")).ok());
  ASSERT_TRUE(fake_->MergePatch("pods", "default", "p", {{"metadata", {{"labels", {{"a", "b"}}}}}}).ok());
  ASSERT_TRUE(fake_->Delete("pods", "default", "p").ok());
  std::vector<std::string> types;
  auto result = client_->Watch(kPods, "default", {.resource_version = version}, [&](WatchEvent event) {
    if (event.type != "BOOKMARK") types.push_back(event.type);
    return types.size() < 3;
  });
  ASSERT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
}

TEST_F(ClientTest, WatchEndsCleanlyAtServerTimeoutAndReportsGone) {
  int bookmarks = 0;
  auto clean =
      client_->Watch(kNodes, "", {.server_timeout = std::chrono::seconds(1)}, [&](const WatchEvent& event) {
        bookmarks += event.type == "BOOKMARK";
        return true;
      });
  EXPECT_TRUE(clean.ok()) << clean.message();
  EXPECT_GT(bookmarks, 0);

  fake_->InjectFault({.action = Fault::Action::kStatus, .watch = true, .status = 410});
  auto gone = client_->Watch(kNodes, "", {.resource_version = "1"}, [](WatchEvent) { return true; });
  EXPECT_TRUE(gone.IsGone()) << gone.message();

  ASSERT_TRUE(fake_->Create("nodes", Node("n")).ok());
  fake_->Compact();
  std::string first_type;
  auto from_now = client_->Watch(kNodes, "", {.resource_version = "0"}, [&](WatchEvent event) {
    first_type = event.type;
    return false;
  });
  EXPECT_TRUE(from_now.ok()) << from_now.message();
  EXPECT_EQ(first_type, "ADDED");  // "0" starts from the current state, never too old
  std::string error_code;
  auto expired = client_->Watch(kNodes, "", {.resource_version = "1"}, [&](WatchEvent event) {
    if (event.type == "ERROR") error_code = event.object["code"].dump();
    return false;
  });
  EXPECT_TRUE(expired.ok()) << expired.message();
  EXPECT_EQ(error_code, "410");
}

TEST_F(ClientTest, BrokenWatchStreamIsAnError) {
  fake_->InjectFault({.action = Fault::Action::kDropWatch, .events_before_drop = 1});
  ASSERT_TRUE(fake_->Create("nodes", Node("a")).ok());
  ASSERT_TRUE(fake_->Create("nodes", Node("b")).ok());
  int events = 0;
  auto broken = client_->Watch(kNodes, "", {.resource_version = "0"}, [&](WatchEvent) {
    ++events;
    return true;
  });
  EXPECT_FALSE(broken.ok());
  EXPECT_EQ(broken.http_status(), 0);
  EXPECT_EQ(events, 1);
}

TEST_F(ClientTest, MalformedWatchLinesAreSkipped) {
  std::vector<std::string> names;
  std::thread writer([&] {
    ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() == 1; }));
    fake_->SendRawWatchLine("nodes", "{not json");
    fake_->SendRawWatchLine("nodes", R"({"type":"ADDED","object":"a string"})");
    ASSERT_TRUE(fake_->Create("nodes", Node("good")).ok());
  });
  auto result = client_->Watch(kNodes, "", {.resource_version = std::to_string(fake_->resource_version())},
                               [&](WatchEvent event) {
                                 if (event.type == "BOOKMARK") return true;
                                 names.push_back(MetadataString(event.object, "name"));
                                 return false;
                               });
  writer.join();
  EXPECT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(names, (std::vector<std::string>{"good"}));
}

// A line with no end in sight (a broken or hostile server) stops the watch with one sentence instead of
// growing the buffer without bound.
TEST(ClientWatch, ALineLongerThanTheBoundIsAnError) {
  httplib::Server server;
  const std::string chunk(1 << 20, 'x');
  server.Get("/api/v1/nodes", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [&](size_t, httplib::DataSink& sink) {
      return sink.write(chunk.data(), chunk.size());
    });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  ClusterConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Client> client = MustClient(config, ClientOptions());
  int events = 0;
  auto result = client->Watch(kNodes, "", {}, [&](WatchEvent) {
    ++events;
    return true;
  });
  server.stop();
  serving.join();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("longer than 16 MiB"), std::string::npos) << result.message();
  EXPECT_EQ(events, 0);
}

TEST(WatchLine, OnlyTypedObjectsAreEvents) {
  EXPECT_FALSE(ParseWatchLine("{not json"));
  EXPECT_FALSE(ParseWatchLine("[1]"));
  EXPECT_FALSE(ParseWatchLine(R"({"type":"ADDED","object":"a string"})"));
  EXPECT_FALSE(ParseWatchLine(R"({"type":7,"object":{}})"));
  EXPECT_FALSE(ParseWatchLine(R"({"type":"ADDED","object":{"a":)" + std::string(100000, '[') + "}}"));
  std::optional<WatchEvent> event = ParseWatchLine(R"({"type":"DELETED","object":{"a":1}})");
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, "DELETED");
  EXPECT_EQ(event->object["a"], 1);
}

TEST_F(ClientTest, CancelInterruptsABlockedWatch) {
  CancelToken cancel;
  std::thread canceller([&] {
    ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() == 1; }));
    cancel.Cancel();
  });
  auto result = client_->Watch(
      kNodes, "", {.allow_bookmarks = false}, [](WatchEvent) { return true; }, &cancel);
  canceller.join();
  EXPECT_TRUE(result.ok()) << result.message();
  EXPECT_TRUE(cancel.cancelled());
}

// --- TLS
// -------------------------------------------------------------------------------------------------------

class TlsClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto certs = mgpu::testing::GenerateTestCerts(dir_->path());
    ASSERT_TRUE(certs.ok()) << certs.message();
    certs_ = new mgpu::testing::TestCerts(certs.value());
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete dir_;
  }
  static std::string Base64File(const std::string& path) {
    std::ifstream in(path);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    static const char kTable[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < data.size(); i += 3) {
      unsigned n = static_cast<unsigned char>(data[i]) << 16;
      if (i + 1 < data.size()) n |= static_cast<unsigned char>(data[i + 1]) << 8;
      if (i + 2 < data.size()) n |= static_cast<unsigned char>(data[i + 2]);
      out += kTable[(n >> 18) & 63];
      out += kTable[(n >> 12) & 63];
      out += i + 1 < data.size() ? kTable[(n >> 6) & 63] : '=';
      out += i + 2 < data.size() ? kTable[n & 63] : '=';
    }
    return out;
  }
  std::unique_ptr<FakeApiServer> StartFake(bool require_client_cert, const std::string& token = "") {
    FakeApiServerOptions options;
    options.tls = true;
    options.cert_file = certs_->server_cert;
    options.key_file = certs_->server_key;
    if (require_client_cert) options.client_ca_file = certs_->ca_cert;
    options.token = token;
    auto fake = std::make_unique<FakeApiServer>(options);
    EXPECT_TRUE(fake->Start().ok());
    EXPECT_TRUE(fake->Create("nodes", Node("n")).ok());
    return fake;
  }

  static TempDir* dir_;
  static mgpu::testing::TestCerts* certs_;
};

TempDir* TlsClientTest::dir_ = nullptr;
mgpu::testing::TestCerts* TlsClientTest::certs_ = nullptr;

TEST_F(TlsClientTest, ClientCertificateFilesFromKubeconfig) {
  auto fake = StartFake(true);
  std::string kubeconfig =
      dir_->Write("kubeconfig-files", "clusters: [{name: c, cluster: {server: \"" + fake->url() +
                                          "\", certificate-authority: ca.crt}}]\n"
                                          "users: [{name: u, user: {client-certificate: "
                                          "client.crt, client-key: client.key}}]\n"
                                          "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
                                          "current-context: a\n");
  auto config = LoadKubeconfig(kubeconfig);
  ASSERT_TRUE(config.ok()) << config.message();
  auto client = MustClient(config.value());
  auto nodes = client->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.message();
  EXPECT_EQ(Names(*nodes), (std::vector<std::string>{"n"}));
  // Watches use the same TLS settings.
  auto watch = client->Watch(kNodes, "", {.resource_version = "0"}, [](WatchEvent) { return false; });
  EXPECT_TRUE(watch.ok()) << watch.message();
}

TEST_F(TlsClientTest, EmbeddedCertificateData) {
  auto fake = StartFake(true);
  std::string yaml =
      "clusters: [{name: c, cluster: {server: \"" + fake->url() +
      "\", certificate-authority-data: " + Base64File(certs_->ca_cert) +
      "}}]\nusers: [{name: u, user: {client-certificate-data: " + Base64File(certs_->client_cert) +
      ", client-key-data: " + Base64File(certs_->client_key) +
      "}}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\n";
  auto config = ParseKubeconfig(yaml, dir_->path());
  ASSERT_TRUE(config.ok()) << config.message();
  auto client = MustClient(config.value());
  auto nodes = client->ListNodes();
  EXPECT_TRUE(nodes.ok()) << nodes.message();
}

TEST_F(TlsClientTest, MissingClientCertificateOrWrongCaFails) {
  auto fake = StartFake(true);
  auto no_cert = MustClient({.server = fake->url(), .ca_file = certs_->ca_cert});
  auto refused = no_cert->ListNodes();
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.http_status(), 0);
  auto no_ca = MustClient({.server = fake->url(),
                           .client_cert_file = certs_->client_cert,
                           .client_key_file = certs_->client_key});
  EXPECT_FALSE(no_ca->ListNodes().ok());  // the test CA is not in the system store
  auto insecure = MustClient({.server = fake->url(),
                              .client_cert_file = certs_->client_cert,
                              .client_key_file = certs_->client_key,
                              .insecure_skip_tls_verify = true});
  EXPECT_TRUE(insecure->ListNodes().ok());
}

// tls-server-name is the name the server certificate must carry (and the SNI); the connection still goes to
// the configured address. The test certificate names 127.0.0.1 and localhost.
TEST_F(TlsClientTest, TlsServerNameIsCheckedInsteadOfTheAddress) {
  auto fake = StartFake(false);
  ASSERT_TRUE(fake->url().starts_with("https://127.0.0.1:")) << fake->url();
  auto named =
      MustClient({.server = fake->url(), .ca_file = certs_->ca_cert, .tls_server_name = "localhost"});
  auto nodes = named->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.message();
  EXPECT_EQ(Names(*nodes), (std::vector<std::string>{"n"}));
  auto watch = named->Watch(kNodes, "", {.resource_version = "0"}, [](WatchEvent) { return false; });
  EXPECT_TRUE(watch.ok()) << watch.message();
  // A name the certificate does not carry fails, though the address itself is in it.
  auto other = MustClient(
      {.server = fake->url(), .ca_file = certs_->ca_cert, .tls_server_name = "kubernetes.default.svc"});
  EXPECT_FALSE(other->ListNodes().ok());
  EXPECT_FALSE(Client::Create({.server = "http://127.0.0.1:1", .tls_server_name = "localhost"}).ok());
}

TEST_F(TlsClientTest, ExecPluginSuppliesAClientCertificate) {
  auto fake = StartFake(true);
  TempDir dir;
  FakePlugin plugin(dir);
  const auto pem = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  plugin.Answer(
      {{"clientCertificateData", pem(certs_->client_cert)}, {"clientKeyData", pem(certs_->client_key)}});
  auto client = MustClient({.server = fake->url(), .ca_file = certs_->ca_cert, .exec = plugin.Plugin()});
  auto nodes = client->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.message();
  auto watch = client->Watch(kNodes, "", {.resource_version = "0"}, [](WatchEvent) { return false; });
  EXPECT_TRUE(watch.ok()) << watch.message();
  EXPECT_EQ(plugin.Runs(), 1u);
}

TEST_F(TlsClientTest, InClusterWithRotatingToken) {
  auto fake = StartFake(false, "sa-token-1");
  TempDir sa;
  sa.Write("token", "sa-token-1");
  std::filesystem::copy_file(certs_->ca_cert, sa.path() + "/ca.crt");
  sa.Write("namespace", "mgpu-system");
  std::string port = std::to_string(fake->port());
  setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", port.c_str(), 1);
  auto config = InClusterConfig(sa.path());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(config.ok()) << config.message();
  auto client = MustClient(config.value());
  auto first = client->ListNodes();
  ASSERT_TRUE(first.ok()) << first.message();
  fake->SetToken("sa-token-2");
  sa.Write("token", "sa-token-2");
  auto second = client->ListNodes();
  EXPECT_TRUE(second.ok()) << second.message();
}

}  // namespace
}  // namespace mgpu::kube

namespace mgpu::kube {
namespace {

std::string RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  pclose(pipe);
  return output;
}

// The fake serves what kubectl needs to read and write pods (discovery, lists, selectors, patches).
TEST(FakeApiServerTest, ServesKubectl) {
  if (std::system("kubectl version --client >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "kubectl is not installed";
  FakeApiServer fake;
  ASSERT_TRUE(fake.Start().ok());
  ASSERT_TRUE(fake.Create("pods", Pod("a", "default", "node-1")).ok());
  ASSERT_TRUE(fake.Create("pods", Pod("b", "team", "node-2")).ok());
  TempDir home;
  std::string kubectl = "HOME=" + home.path() + " KUBECONFIG= kubectl --server " + fake.url() + " ";
  std::string all = RunCommand(kubectl + "get pods -A -o json 2>&1");
  Json list = Json::parse(all, nullptr, false);
  ASSERT_TRUE(list.is_object()) << all;
  EXPECT_EQ(Names(list), (std::vector<std::string>{"a", "b"}));
  std::string selected =
      RunCommand(kubectl + "get pods -A -o json --field-selector spec.nodeName=node-2 2>&1");
  Json on_node = Json::parse(selected, nullptr, false);
  ASSERT_TRUE(on_node.is_object()) << selected;
  EXPECT_EQ(Names(on_node), (std::vector<std::string>{"b"}));
  std::string annotate = RunCommand(kubectl + "annotate pod a -n default mgpu.io/x=1 2>&1");
  EXPECT_EQ((*fake.Get("pods", "default", "a"))["metadata"]["annotations"]["mgpu.io/x"], "1") << annotate;
  std::string one = RunCommand(kubectl + "get pod b -n team -o jsonpath={.spec.nodeName} 2>&1");
  EXPECT_EQ(one, "node-2");
}

}  // namespace
}  // namespace mgpu::kube
