#include "common/kube/informer.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::kube {
namespace {

using mgpu::testing::FakeApiServer;
using mgpu::testing::Fault;
using mgpu::testing::WaitUntil;

Json Pod(const std::string& name, const std::string& node = "") {
  Json pod = {{"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

std::string Key(const Json& object) {
  return MetadataString(object, "namespace") + "/" + MetadataString(object, "name");
}

// What a handler has seen of one object.
struct Seen {
  std::string version;
  std::string uid;
  bool operator==(const Seen&) const = default;
};
using State = std::map<std::string, Seen>;

// Applies deliveries to its own copy of the world and notes every delivery that breaks the informer's
// promise: an add of a known object, an update from a version other than the last delivered or to an older
// one, a delete of an unknown object.
class Recorder {
 public:
  InformerHandlers Handlers() {
    return {.on_add = [this](const Json& object) { Add(object); },
            .on_update = [this](const Json& old_object,
                                const Json& new_object) { Update(old_object, new_object); },
            .on_delete = [this](const Json& object) { Delete(object); }};
  }
  State state() const {
    std::lock_guard lock(mu_);
    return state_;
  }
  std::vector<std::string> violations() const {
    std::lock_guard lock(mu_);
    return violations_;
  }
  int deliveries() const {
    std::lock_guard lock(mu_);
    return deliveries_;
  }

 private:
  void Add(const Json& object) {
    std::lock_guard lock(mu_);
    ++deliveries_;
    if (state_.contains(Key(object))) violations_.push_back("add of known " + Key(object));
    state_[Key(object)] = {MetadataString(object, "resourceVersion"), MetadataString(object, "uid")};
  }
  void Update(const Json& old_object, const Json& new_object) {
    std::lock_guard lock(mu_);
    ++deliveries_;
    auto it = state_.find(Key(new_object));
    std::string from = MetadataString(old_object, "resourceVersion");
    std::string to = MetadataString(new_object, "resourceVersion");
    if (it == state_.end()) {
      violations_.push_back("update of unknown " + Key(new_object));
    } else if (it->second.version != from) {
      violations_.push_back("update of " + Key(new_object) + " from " + from + " but last saw " +
                            it->second.version);
    }
    if (std::stoll(to) <= std::stoll(from))
      violations_.push_back("update of " + Key(new_object) + " went backwards");
    state_[Key(new_object)] = {to, MetadataString(new_object, "uid")};
  }
  void Delete(const Json& object) {
    std::lock_guard lock(mu_);
    ++deliveries_;
    if (state_.erase(Key(object)) == 0) violations_.push_back("delete of unknown " + Key(object));
  }

  mutable std::mutex mu_;
  State state_;
  std::vector<std::string> violations_;
  int deliveries_ = 0;
};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mgpu::testing::FakeApiServerOptions options;
    options.bookmark_interval = std::chrono::milliseconds(50);
    fake_ = std::make_unique<FakeApiServer>(options);
    ASSERT_TRUE(fake_->Start().ok());
    auto client =
        Client::Create({.server = fake_->url()}, {.request_timeout = std::chrono::milliseconds(1000),
                                                  .max_retry_wait = std::chrono::milliseconds(10)});
    ASSERT_TRUE(client.ok()) << client.message();
    client_ = std::move(client.value());
  }
  void TearDown() override {
    informer_.reset();
    client_.reset();
    fake_->Stop();
  }

  void StartInformer(const ListOptions& selectors = {}, ApiResource resource = kPods,
                     size_t max_objects = 0) {
    InformerOptions options{.resource = resource,
                            .selectors = selectors,
                            .initial_backoff = std::chrono::milliseconds(10),
                            .max_backoff = std::chrono::milliseconds(100),
                            .max_objects = max_objects};
    informer_ = std::make_unique<Informer>(*client_, options, recorder_.Handlers());
    informer_->Start();
  }

  // The server's pods (those the selector keeps), as handlers should have seen them.
  State ServerState(const std::function<bool(const Json&)>& keep = nullptr) const {
    State state;
    for (const Json& pod : fake_->List("pods")) {
      if (MetadataString(pod, "name").empty()) continue;  // malformed objects planted by a test
      if (keep && !keep(pod)) continue;
      state[Key(pod)] = {MetadataString(pod, "resourceVersion"), MetadataString(pod, "uid")};
    }
    return state;
  }

  // Waits until the handlers' view equals the server's, then checks no delivery broke the rules.
  void ExpectConverged(const std::function<bool(const Json&)>& keep = nullptr) {
    EXPECT_TRUE(WaitUntil([&] { return recorder_.state() == ServerState(keep); }, std::chrono::seconds(20)))
        << "handlers saw " << recorder_.state().size() << " objects, the server has "
        << ServerState(keep).size();
    EXPECT_EQ(recorder_.violations(), std::vector<std::string>());
    auto snapshot = informer_->Snapshot();
    EXPECT_EQ(snapshot.size(), ServerState(keep).size());
  }

  // Creates, patches and deletes pods at random, `count` changes in all.
  void Churn(int count, unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < count; ++i) {
      std::string name = "pod-" + std::to_string(rng() % 12);
      switch (rng() % 3) {
        case 0:
          (void)fake_->Create("pods", Pod(name));
          break;
        case 1:
          (void)fake_->MergePatch("pods", "default", name,
                                  {{"metadata", {{"annotations", {{"step", std::to_string(i)}}}}}});
          break;
        case 2:
          (void)fake_->Delete("pods", "default", name);
          break;
      }
    }
  }

  size_t WatchRequests() const {
    auto requests = fake_->requests();
    return std::count_if(requests.begin(), requests.end(), [](const auto& r) { return r.watch; });
  }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<Client> client_;
  Recorder recorder_;
  std::unique_ptr<Informer> informer_;
};

TEST_F(InformerTest, ListsThenFollowsChanges) {
  for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(fake_->Create("pods", Pod(name)).ok());
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  EXPECT_EQ(recorder_.state(), ServerState());  // the initial list is delivered before HasSynced
  ASSERT_TRUE(fake_->Create("pods", Pod("d")).ok());
  ASSERT_TRUE(fake_->MergePatch("pods", "default", "a", {{"metadata", {{"labels", {{"x", "y"}}}}}}).ok());
  ASSERT_TRUE(fake_->Delete("pods", "default", "b").ok());
  ExpectConverged();
  EXPECT_EQ(recorder_.deliveries(), 6);
  EXPECT_EQ(informer_->list_count(), 1);
  auto a = informer_->Get("default", "a");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["metadata"]["labels"]["x"], "y");
}

// More objects than the bound: not synced, nothing past the bound kept, synced again once they fit.
TEST_F(InformerTest, MoreObjectsThanTheBoundIsNotSynced) {
  for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(fake_->Create("pods", Pod(name)).ok());
  StartInformer({}, kPods, 2);
  ASSERT_TRUE(WaitUntil([&] { return informer_->Overfull(); }));
  EXPECT_FALSE(informer_->HasSynced());
  EXPECT_TRUE(informer_->Snapshot().empty());
  EXPECT_EQ(recorder_.deliveries(), 0);

  ASSERT_TRUE(fake_->Delete("pods", "default", "c").ok());
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  EXPECT_FALSE(informer_->Overfull());
  ExpectConverged();

  // A watched add past the bound is not kept and ends the sync...
  ASSERT_TRUE(fake_->Create("pods", Pod("d")).ok());
  ASSERT_TRUE(WaitUntil([&] { return informer_->Overfull(); }));
  EXPECT_FALSE(informer_->HasSynced());
  EXPECT_EQ(informer_->Snapshot().size(), 2u);
  EXPECT_FALSE(recorder_.state().contains("default/d"));
  // ...until the objects fit again.
  ASSERT_TRUE(fake_->Delete("pods", "default", "a").ok());
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ExpectConverged();
}

TEST_F(InformerTest, FieldSelectorFollowsBindingToTheNode) {
  ASSERT_TRUE(fake_->Create("pods", Pod("pending")).ok());
  ASSERT_TRUE(fake_->Create("pods", Pod("elsewhere", "node-b")).ok());
  StartInformer({.field_selector = "spec.nodeName=node-a"});
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  EXPECT_TRUE(recorder_.state().empty());
  ASSERT_TRUE(client_->BindPod("default", "pending", "", "node-a").ok());
  auto on_node_a = [](const Json& pod) { return pod["spec"].value("nodeName", "") == "node-a"; };
  ExpectConverged(on_node_a);
  EXPECT_EQ(recorder_.state().size(), 1u);
  ASSERT_TRUE(fake_->Delete("pods", "default", "pending").ok());
  ExpectConverged(on_node_a);
  EXPECT_TRUE(recorder_.state().empty());
}

TEST_F(InformerTest, RecoversFromDroppedWatchesWithoutLosingOrRepeatingChanges) {
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  for (unsigned round = 0; round < 10; ++round) {
    std::thread writer([&] { Churn(30, round); });
    ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() > 0; }));
    fake_->DropWatches();
    writer.join();
  }
  ExpectConverged();
  EXPECT_GT(informer_->list_count(), 1);
}

TEST_F(InformerTest, RecoversFromInjectedWatchFaults) {
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  fake_->InjectFault(
      {.action = Fault::Action::kDropWatch, .watch = true, .events_before_drop = 3, .times = 4});
  fake_->InjectFault(
      {.action = Fault::Action::kTruncateBody, .watch = true, .events_before_drop = 2, .times = 3});
  fake_->InjectFault({.action = Fault::Action::kStatus, .watch = true, .status = 410, .times = 2});
  fake_->InjectFault({.action = Fault::Action::kStatus, .watch = true, .status = 500, .times = 2});
  fake_->InjectFault({.action = Fault::Action::kStatus, .watch = true, .status = 429, .times = 2});
  fake_->InjectFault(
      {.action = Fault::Action::kDelay, .watch = true, .delay = std::chrono::milliseconds(50), .times = 2});
  fake_->DropWatches();  // the faults apply from the next watch on
  for (unsigned round = 0; fake_->pending_faults() > 0; ++round) {
    ASSERT_LT(round, 100u) << fake_->pending_faults() << " faults never reached";
    Churn(10, round);
    // Each round cuts the stream and waits for the next watch request, which takes the next fault.
    size_t before = WatchRequests();
    fake_->DropWatches();
    ASSERT_TRUE(WaitUntil([&] { return WatchRequests() > before || fake_->pending_faults() == 0; }));
  }
  Churn(10, 9999);
  ExpectConverged();
  EXPECT_GT(informer_->list_count(), 1);
}

TEST_F(InformerTest, RecoversFromListFaults) {
  for (const char* name : {"a", "b"}) ASSERT_TRUE(fake_->Create("pods", Pod(name)).ok());
  auto list_fault = [](Fault::Action action, int status = 500) {
    return Fault{.action = action, .method = "GET", .watch = false, .status = status};
  };
  fake_->InjectFault(list_fault(Fault::Action::kStatus, 500));
  fake_->InjectFault(list_fault(Fault::Action::kStatus, 429));
  fake_->InjectFault(list_fault(Fault::Action::kTruncateBody));
  Fault slow = list_fault(Fault::Action::kDelay);
  slow.delay = std::chrono::seconds(3);  // beyond the client's request timeout
  fake_->InjectFault(slow);
  fake_->InjectFault(list_fault(Fault::Action::kStatus, 503));
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(20)));
  ExpectConverged();
  EXPECT_EQ(informer_->list_count(), 1);
  std::vector<mgpu::testing::RecordedRequest> lists;
  for (const auto& r : fake_->requests()) {
    if (!r.watch) lists.push_back(r);
  }
  EXPECT_EQ(lists.size(), 6u);  // five failures (the 429 retried inside the client), then success
}

TEST_F(InformerTest, GoneInTheStreamRelists) {
  ASSERT_TRUE(fake_->Create("pods", Pod("a")).ok());
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() > 0; }));
  fake_->SendRawWatchLine("pods",
                          R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})");
  ASSERT_TRUE(WaitUntil([&] { return informer_->list_count() == 2; }));
  ASSERT_TRUE(fake_->Create("pods", Pod("b")).ok());
  ExpectConverged();
}

TEST_F(InformerTest, DeletionsAndRecreationsDuringAnOutageArriveOnRelist) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(fake_->Create("pods", Pod("p" + std::to_string(i))).ok());
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  fake_->InjectFault({.action = Fault::Action::kStatus, .watch = true, .status = 500, .times = -1});
  fake_->DropWatches();
  ASSERT_TRUE(fake_->Delete("pods", "default", "p1").ok());
  ASSERT_TRUE(fake_->Delete("pods", "default", "p2").ok());
  ASSERT_TRUE(fake_->Create("pods", Pod("p2")).ok());  // same name, new uid
  ASSERT_TRUE(fake_->MergePatch("pods", "default", "p3", {{"metadata", {{"labels", {{"v", "2"}}}}}}).ok());
  ExpectConverged();  // relists between the failing watches bring the handlers up to date
  fake_->ClearFaults();
  ASSERT_TRUE(fake_->Create("pods", Pod("p9")).ok());
  ExpectConverged();
}

TEST_F(InformerTest, MalformedObjectsAreSkipped) {
  fake_->StoreRaw("pods", "default/", {{"metadata", {{"namespace", "default"}}}});  // no name
  ASSERT_TRUE(fake_->Create("pods", Pod("good")).ok());
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() > 0; }));
  fake_->SendRawWatchLine("pods", "this is not json");
  fake_->SendRawWatchLine("pods", R"({"type":"MODIFIED","object":{"metadata":{"name":7}}})");
  fake_->SendRawWatchLine("pods",
                          R"({"type":"SURPRISE","object":{"metadata":{"name":"x","resourceVersion":"1"}}})");
  ASSERT_TRUE(fake_->Create("pods", Pod("after")).ok());
  ExpectConverged();
  EXPECT_EQ(informer_->list_count(), 1);
}

TEST_F(InformerTest, BookmarksAdvanceTheResourceVersion) {
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(fake_->Create("nodes", {{"metadata", {{"name", "n"}}}}).ok());  // another kind: no pod event
  std::string version = std::to_string(fake_->resource_version());
  EXPECT_TRUE(WaitUntil([&] { return informer_->resource_version() == version; }));
  EXPECT_EQ(recorder_.deliveries(), 0);
}

TEST_F(InformerTest, StopInterruptsAnIdleWatch) {
  StartInformer();
  ASSERT_TRUE(informer_->WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return fake_->open_watches() > 0; }));
  informer_->Stop();
  EXPECT_TRUE(WaitUntil([&] { return fake_->open_watches() == 0; }));
  informer_->Stop();  // idempotent
}

TEST_F(InformerTest, StopWhileTheServerIsDown) {
  fake_->InjectFault({.action = Fault::Action::kStatus, .status = 503, .times = -1});
  StartInformer();
  EXPECT_FALSE(informer_->WaitForSync(std::chrono::milliseconds(50)));
  informer_->Stop();
  EXPECT_FALSE(informer_->HasSynced());
}

}  // namespace
}  // namespace mgpu::kube
