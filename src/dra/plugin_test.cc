// The DRA kubelet plugin over real gRPC on unix sockets, with a client standing where the kubelet stands: the
// plugin watcher's GetInfo and NotifyRegistrationStatus, NodePrepareResources / NodeUnprepareResources and
// the health stream.
#include "dra/plugin.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "dra/cdi.h"
#include "dra/test_claims.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/drahealth/v1alpha1/api.grpc.pb.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;
namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;

std::shared_ptr<grpc::Channel> Dial(const std::string& path) {
  return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

class PluginTest : public ::testing::Test {
 protected:
  PluginTest() : state_({Card{0, "GPU-a", "NVIDIA A10", 24576, true}}) {
    config_.dra.kubelet_root_dir = dir_.path() + "/kubelet";
    config_.dra.cdi_directory = dir_.path() + "/cdi";
    config_.dra.cards = "any";  // the opt-in six-device layout: six devices per card
    claims_ = PreparedClaims::Open(dir_.path() + "/state/checkpoint.json").value();
    preparer_ = std::make_unique<Preparer>(
        config_, "node-a", std::vector<NodeCard>{{state_.Cards()[0], 24576, "", {}}}, state_, *claims_, api_);
    plugin_ = std::make_unique<KubeletPlugin>(config_, "node-a", *preparer_, state_);
    Status s = plugin_->Start();
    EXPECT_TRUE(s.ok()) << s.message();
  }

  testing::TempDir dir_;
  Config config_;
  dp::DeviceState state_;
  test::Claims api_;
  std::unique_ptr<PreparedClaims> claims_;
  std::unique_ptr<Preparer> preparer_;
  std::unique_ptr<KubeletPlugin> plugin_;
};

TEST_F(PluginTest, RegistersTheWayThePluginWatcherAsks) {
  EXPECT_EQ(RegistrationSocketPath(config_),
            config_.dra.kubelet_root_dir + "/plugins_registry/mgpu.io-reg.sock");
  auto registration = pluginregistration::Registration::NewStub(Dial(RegistrationSocketPath(config_)));
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(registration->GetInfo(Context().get(), {}, &info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "mgpu.io");
  EXPECT_EQ(info.endpoint(), config_.dra.kubelet_root_dir + "/plugins/mgpu.io/dra.sock");
  EXPECT_EQ(std::vector<std::string>(info.supported_versions().begin(), info.supported_versions().end()),
            std::vector<std::string>{"v1.DRAPlugin"});
  EXPECT_FALSE(plugin_->Registered());
  pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(true);
  pluginregistration::RegistrationStatusResponse reply;
  ASSERT_TRUE(registration->NotifyRegistrationStatus(Context().get(), status, &reply).ok());
  EXPECT_TRUE(plugin_->Registered());

  plugin_->Stop();
  // The registration socket goes with the plugin: the kubelet unregisters the driver.
  EXPECT_FALSE(std::filesystem::exists(RegistrationSocketPath(config_)));
  EXPECT_FALSE(plugin_->Registered());
}

TEST_F(PluginTest, PreparesAndUnpreparesEveryClaimOfACall) {
  api_.Put(test::Claim("good", "u1",
                       json::array({test::Result("gpu-0-fixed", {{"cores", "30"}, {"memory", "4Gi"}})})));
  api_.Put(test::Claim("bad", "u2", nullptr));
  auto dra = drapb::DRAPlugin::NewStub(Dial(PluginSocketPath(config_)));
  drapb::NodePrepareResourcesRequest request;
  for (auto [uid, name] : {std::pair{"u1", "good"}, {"u2", "bad"}}) {
    drapb::Claim* c = request.add_claims();
    c->set_namespace_("default");
    c->set_uid(uid);
    c->set_name(name);
  }
  drapb::NodePrepareResourcesResponse response;
  ASSERT_TRUE(dra->NodePrepareResources(Context().get(), request, &response).ok());
  ASSERT_EQ(response.claims().size(), 2u);
  const drapb::NodePrepareResourceResponse& good = response.claims().at("u1");
  EXPECT_EQ(good.error(), "");
  ASSERT_EQ(good.devices_size(), 1);
  EXPECT_EQ(good.devices(0).pool_name(), "node-a");
  EXPECT_EQ(good.devices(0).device_name(), "gpu-0-fixed");
  EXPECT_EQ(good.devices(0).request_names(0), "gpu");
  EXPECT_EQ(good.devices(0).share_id(), "share-gpu-0-fixed");
  EXPECT_EQ(good.devices(0).cdi_device_ids(0), "mgpu.io/claim=u1");
  EXPECT_EQ(response.claims().at("u2").error(), "claim default/bad is not allocated");
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath("u1", config_)));

  drapb::NodeUnprepareResourcesRequest undo;
  *undo.mutable_claims() = request.claims();
  drapb::NodeUnprepareResourcesResponse undone;
  ASSERT_TRUE(dra->NodeUnprepareResources(Context().get(), undo, &undone).ok());
  ASSERT_EQ(undone.claims().size(), 2u);  // every claim gets an entry, the never-prepared one too
  EXPECT_EQ(undone.claims().at("u1").error(), "");
  EXPECT_EQ(undone.claims().at("u2").error(), "");
  EXPECT_FALSE(std::filesystem::exists(CdiSpecPath("u1", config_)));
}

TEST_F(PluginTest, HealthStreamSendsEveryDeviceAtOnceAndEachChange) {
  auto health = v1alpha1::DRAResourceHealth::NewStub(Dial(PluginSocketPath(config_)));
  grpc::ClientContext context;
  auto stream = health->NodeWatchResources(&context, {});
  v1alpha1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(stream->Read(&message));
  ASSERT_EQ(message.devices_size(), 6);
  for (const auto& d : message.devices()) {
    EXPECT_EQ(d.device().pool_name(), "node-a");
    EXPECT_EQ(d.health(), v1alpha1::HEALTHY);
  }
  EXPECT_EQ(message.devices(5).device().device_name(), "gpu-0-whole");
  state_.SetHealthy("GPU-a", false);
  ASSERT_TRUE(stream->Read(&message));
  for (const auto& d : message.devices()) EXPECT_EQ(d.health(), v1alpha1::UNHEALTHY);
  EXPECT_NE(message.devices(0).message().find("GPU-a"), std::string::npos);
  context.TryCancel();
  while (stream->Read(&message)) {
  }
}

}  // namespace
}  // namespace mgpu::dra
