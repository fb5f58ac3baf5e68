// The leader elector against the fake API server's Leases. Each replica's client sends its identity as its
// bearer token, so the requests the server records tell the replicas apart.
#include "extender/leader.h"

#include <gtest/gtest.h>

#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::extender {
namespace {

using namespace std::chrono_literals;
using mgpu::testing::WaitUntil;
using nlohmann::json;

constexpr auto kWait = 30s;
constexpr char kNamespace[] = "kube-system";
constexpr char kLease[] = "mgpu-scheduler-extender";
const std::string kLeases = std::string("/apis/coordination.k8s.io/v1/namespaces/") + kNamespace + "/leases";
const std::string kLeasePath = kLeases + "/" + kLease;

class LeaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start().ok()); }

  LeaderElector& Elector(const std::string& identity, std::chrono::seconds duration = 1s) {
    kube::ClusterConfig cluster;
    cluster.server = api_.url();
    cluster.token = identity;
    auto client = kube::Client::Create(cluster);
    EXPECT_TRUE(client.ok()) << client.message();
    clients_.push_back(std::move(*client));
    electors_.push_back(
        std::make_unique<LeaderElector>(*clients_.back(), kNamespace, kLease, identity, duration));
    return *electors_.back();
  }

  // Waits until `elector` holds the lease.
  bool Leads(const LeaderElector& elector) {
    return WaitUntil([&] { return elector.IsLeader(); }, kWait);
  }

  // A lease left by a replica that is gone: nobody renews it.
  void StoreLease(const std::string& holder) {
    ASSERT_TRUE(api_.Create("leases", {{"metadata", {{"name", kLease}, {"namespace", kNamespace}}},
                                       {"spec",
                                        {{"holderIdentity", holder},
                                         {"leaseDurationSeconds", 1},
                                         {"renewTime", "2026-01-01T00:00:00.000000Z"}}}})
                    .ok());
  }

  json Spec() {
    return api_.Get("leases", kNamespace, kLease).value_or(json::object()).value("spec", json::object());
  }
  std::string Holder() { return Spec().value("holderIdentity", "<no lease>"); }

  // The lease requests `identity` made, in order ("GET", "PUT", "POST").
  std::vector<std::string> RequestsOf(const std::string& identity) {
    std::vector<std::string> out;
    for (const auto& r : api_.requests()) {
      if (r.authorization == "Bearer " + identity && r.path.starts_with(kLeases)) out.push_back(r.method);
    }
    return out;
  }
  size_t Count(const std::string& identity, const std::string& method) {
    const std::vector<std::string> requests = RequestsOf(identity);
    return std::count(requests.begin(), requests.end(), method);
  }
  // How many times `identity` read the lease before it first wrote it.
  size_t ReadsBeforeFirstUpdate(const std::string& identity) {
    const std::vector<std::string> requests = RequestsOf(identity);
    const auto put = std::find(requests.begin(), requests.end(), "PUT");
    return std::count(requests.begin(), put, "GET");
  }

  testing::FakeApiServer api_;
  std::vector<std::unique_ptr<kube::Client>> clients_;
  std::vector<std::unique_ptr<LeaderElector>> electors_;  // stopped before their clients go
};

TEST_F(LeaderTest, CreatesAMissingLeaseAndRenewsIt) {
  LeaderElector& a = Elector("a");
  EXPECT_FALSE(a.IsLeader());
  a.Start();
  ASSERT_TRUE(Leads(a));
  EXPECT_EQ(Holder(), "a");
  EXPECT_EQ(Count("a", "POST"), 1u);
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 0);
  EXPECT_EQ(Spec().value("leaseDurationSeconds", 0), 1);

  const std::string first = Spec().value("renewTime", "");
  ASSERT_TRUE(WaitUntil([&] { return Spec().value("renewTime", "") != first; }, kWait));
  EXPECT_EQ(Holder(), "a");
  EXPECT_EQ(Spec().value("acquireTime", ""), first);  // renewed, not acquired again
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 0);
}

TEST_F(LeaderTest, TakesAReleasedLeaseAtOnce) {
  StoreLease("");
  LeaderElector& b = Elector("b");
  b.Start();
  ASSERT_TRUE(Leads(b));
  EXPECT_EQ(Holder(), "b");
  EXPECT_EQ(ReadsBeforeFirstUpdate("b"), 1u);
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 1);
}

// The holder renews well within its duration; the follower waits a whole duration of its own without a change
// before it takes over, so it never does while the holder lives.
TEST_F(LeaderTest, LeavesALeaseItsHolderRenews) {
  LeaderElector& a = Elector("a");
  a.Start();
  ASSERT_TRUE(Leads(a));
  LeaderElector& b = Elector("b");
  b.Start();
  // b's rounds are at least 100 ms apart: fifteen reads span more than its duration of 1 s.
  ASSERT_TRUE(WaitUntil([&] { return Count("b", "GET") >= 15; }, kWait));
  EXPECT_EQ(Count("b", "PUT"), 0u);
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(Holder(), "a");

  b.Stop();  // a follower has nothing to give back
  EXPECT_EQ(Holder(), "a");
}

TEST_F(LeaderTest, TakesOverALeaseNobodyRenewsOnlyAfterItsDuration) {
  StoreLease("gone");
  LeaderElector& b = Elector("b");
  b.Start();
  ASSERT_TRUE(Leads(b));
  EXPECT_EQ(Holder(), "b");
  EXPECT_GE(ReadsBeforeFirstUpdate("b"), 2u);  // the first read only starts b's own clock
  EXPECT_EQ(Spec().value("leaseTransitions", -1), 1);
}

TEST_F(LeaderTest, StopGivesTheLeaseUpAndAFollowerTakesItAtOnce) {
  LeaderElector& a = Elector("a");
  a.Start();
  ASSERT_TRUE(Leads(a));
  a.Stop();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(Holder(), "");

  LeaderElector& b = Elector("b");
  b.Start();
  ASSERT_TRUE(Leads(b));
  EXPECT_EQ(ReadsBeforeFirstUpdate("b"), 1u);
  EXPECT_EQ(Holder(), "b");
}

// A 409 means another replica wrote the lease first: no leadership from that round, and the next rounds go
// on.
TEST_F(LeaderTest, AConflictOnUpdateIsNoLeadership) {
  StoreLease("");
  api_.InjectFault({.action = testing::Fault::Action::kStatus,
                    .method = "PUT",
                    .path_prefix = kLeasePath,
                    .status = 409,
                    .times = -1});
  LeaderElector& b = Elector("b");
  b.Start();
  ASSERT_TRUE(WaitUntil([&] { return Count("b", "PUT") >= 3; }, kWait));
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(Holder(), "");

  api_.ClearFaults();
  ASSERT_TRUE(Leads(b));
  EXPECT_EQ(Holder(), "b");
}

TEST_F(LeaderTest, ALeaderGoesOnRenewingAfterAConflict) {
  LeaderElector& a = Elector("a");
  a.Start();
  ASSERT_TRUE(Leads(a));
  api_.InjectFault({.action = testing::Fault::Action::kStatus,
                    .method = "PUT",
                    .path_prefix = kLeasePath,
                    .status = 409,
                    .times = 1});
  ASSERT_TRUE(WaitUntil([&] { return api_.pending_faults() == 0; }, kWait));
  const size_t puts = Count("a", "PUT");
  const std::string refused = Spec().value("renewTime", "");
  ASSERT_TRUE(
      WaitUntil([&] { return Count("a", "PUT") > puts && Spec().value("renewTime", "") != refused; }, kWait));
  EXPECT_EQ(Holder(), "a");
}

}  // namespace
}  // namespace mgpu::extender
