// One node's DRA daemon over static cards, the fake API server and a client standing where the kubelet
// stands: it registers, publishes the node's slices, prepares a claim read from the API server, and after a
// restart answers the kubelet's repeated call from its checkpoint without reading the claim again.
#include "dra/daemon.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "dra/cdi.h"
#include "dra/test_claims.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"
#include "node/static_backend.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using mgpu::testing::WaitUntil;
using nlohmann::json;
namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;

class DaemonTest : public ::testing::Test {
 protected:
  DaemonTest() {
    EXPECT_TRUE(api_.Start().ok());
    EXPECT_TRUE(api_.Create("nodes", {{"metadata", {{"name", "node-a"}}}}).ok());
    config_.isolation.backend = IsolationBackend::kNone;  // the guard's set-up: isolation_setup_test.cc
    config_.dra.kubelet_root_dir = dir_.path() + "/kubelet";
    config_.dra.cdi_directory = dir_.path() + "/cdi";
    config_.dra.cards = "any";  // the opt-in six-device layout: a counters slice and a devices slice
    config_.dra.state_directory = dir_.path() + "/state";
  }

  std::unique_ptr<Daemon> StartDaemon() {
    auto backend = std::make_unique<node::StaticBackend>(
        std::vector<Card>{{0, "GPU-a", "NVIDIA A10", 24576, true}, {1, "GPU-b", "NVIDIA A10", 24576, true}});
    backend_ = backend.get();
    auto d = std::make_unique<Daemon>(config_, "node-a", std::move(backend));
    Status s = d->Start({.server = api_.url()});
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }

  drapb::NodePrepareResourcesResponse Prepare(const std::string& uid, const std::string& name) {
    auto stub = drapb::DRAPlugin::NewStub(
        grpc::CreateChannel("unix:" + PluginSocketPath(config_), grpc::InsecureChannelCredentials()));
    drapb::NodePrepareResourcesRequest request;
    drapb::Claim* c = request.add_claims();
    c->set_namespace_("default");
    c->set_uid(uid);
    c->set_name(name);
    drapb::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(stub->NodePrepareResources(&context, request, &response).ok());
    return response;
  }

  int ClaimReads() {
    int n = 0;
    for (const auto& r : api_.requests())
      n += r.method == "GET" && r.path.find("/resourceclaims/") != std::string::npos;
    return n;
  }

  testing::TempDir dir_;
  testing::FakeApiServer api_;
  Config config_;
  node::StaticBackend* backend_ = nullptr;
};

TEST_F(DaemonTest, RegistersPublishesPreparesAndRemembersAcrossARestart) {
  auto daemon = StartDaemon();
  pluginregistration::PluginInfo info;
  {
    auto registration = pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix:" + RegistrationSocketPath(config_), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    ASSERT_TRUE(registration->GetInfo(&context, {}, &info).ok());
  }
  EXPECT_EQ(info.endpoint(), PluginSocketPath(config_));
  ASSERT_TRUE(WaitUntil([&] { return daemon->publisher()->UpToDate(); }));
  EXPECT_EQ(api_.List("resourceslices").size(), 2u);

  json claim = test::Claim("c1", "u1",
                           json::array({test::Result("gpu-1-fixed", {{"cores", "30"}, {"memory", "4Gi"}})}));
  auto created = api_.Create("resourceclaims", claim);
  ASSERT_TRUE(created.ok());
  const std::string uid = (*created)["metadata"]["uid"];  // the API server's
  auto first = Prepare(uid, "c1");
  ASSERT_EQ(first.claims().at(uid).error(), "");
  EXPECT_EQ(first.claims().at(uid).devices(0).cdi_device_ids(0), "mgpu.io/claim=" + uid);
  EXPECT_EQ(ClaimReads(), 1);
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath(uid, config_)));

  // A health change reaches the slices (taint) in a new pool generation.
  const int64_t before = daemon->publisher()->generation();
  backend_->SetHealthy("GPU-a", false, "XID 79");
  ASSERT_TRUE(WaitUntil(
      [&] { return daemon->publisher()->generation() > before && daemon->publisher()->UpToDate(); }));

  daemon->Stop();
  daemon.reset();
  // Stopping keeps the slices and the claim's spec: the kubelet keeps running the pod.
  EXPECT_EQ(api_.List("resourceslices").size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath(uid, config_)));

  auto again = StartDaemon();
  auto repeated = Prepare(uid, "c1");
  EXPECT_EQ(repeated.claims().at(uid).SerializeAsString(), first.claims().at(uid).SerializeAsString());
  EXPECT_EQ(ClaimReads(), 1);  // from the checkpoint
  ASSERT_TRUE(WaitUntil([&] { return again->publisher()->UpToDate(); }));
  EXPECT_GT(again->publisher()->generation(), before + 1);
}

TEST_F(DaemonTest, RemoveNodeSlicesDeletesOnlyThisNodesSlicesOfTheDriver) {
  {
    auto daemon = StartDaemon();
    ASSERT_TRUE(WaitUntil([&] { return daemon->publisher()->UpToDate(); }));
  }
  json other = {{"metadata", {{"name", "node-b-x"}}},
                {"spec",
                 {{"driver", "mgpu.io"},
                  {"nodeName", "node-b"},
                  {"pool", {{"name", "node-b"}, {"generation", 1}, {"resourceSliceCount", 1}}}}}};
  ASSERT_TRUE(api_.Create("resourceslices", other).ok());
  auto client = kube::Client::Create({.server = api_.url()});
  ASSERT_TRUE(client.ok());
  auto removed = RemoveNodeSlices(**client, "node-a", config_);
  ASSERT_TRUE(removed.ok()) << removed.message();
  EXPECT_EQ(*removed, 2);
  ASSERT_EQ(api_.List("resourceslices").size(), 1u);
  EXPECT_EQ(api_.List("resourceslices")[0]["metadata"]["name"], "node-b-x");
}

TEST_F(DaemonTest, ACorruptCheckpointStopsTheStart) {
  std::filesystem::create_directories(config_.dra.state_directory);
  dir_.Write("state/checkpoint.json", "{torn");
  Daemon d(config_, "node-a",
           std::make_unique<node::StaticBackend>(std::vector<Card>{{0, "GPU-a", "m", 1024, true}}));
  Status s = d.Start({.server = api_.url()});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot be used"), std::string::npos);
}

}  // namespace
}  // namespace mgpu::dra
