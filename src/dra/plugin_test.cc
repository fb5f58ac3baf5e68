// The DRA kubelet plugin over real gRPC on unix sockets, with a client standing where the kubelet stands: the
// plugin watcher's GetInfo and NotifyRegistrationStatus, NodePrepareResources / NodeUnprepareResources and
// the health stream.
#include "dra/plugin.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
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
  node::DeviceState state_;
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

// A unix socket at `path` that nobody answers on: bound, then closed without unlinking (what a process
// killed with SIGKILL leaves).
void DeadSocket(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0) << path;
  close(fd);
}

constexpr const char* kOld = "0b0a0000-0000-4000-8000-000000000001";
constexpr const char* kNew = "0b0a0000-0000-4000-8000-000000000002";
constexpr const char* kDead = "0b0a0000-0000-4000-8000-00000000dead";

// The two instances of a rolling update (docs/dra.md §1): each on sockets of its own, both registered and
// serving at once, on one checkpoint and CDI folder; the kubelet may prepare a claim through one and
// unprepare it through the other. The old one's SIGTERM takes its sockets and ready file, not the new one's.
TEST_F(PluginTest, TwoInstancesServeTogetherOnSocketsOfTheirOwn) {
  plugin_->Stop();
  EXPECT_EQ(PluginSocketPath(config_, kOld), config_.dra.kubelet_root_dir + "/plugins/mgpu.io/dra-" +
                                                 std::string(kOld) + ".sock");
  EXPECT_EQ(RegistrationSocketPath(config_, kOld), config_.dra.kubelet_root_dir + "/plugins_registry/mgpu.io-" +
                                                       std::string(kOld) + "-reg.sock");
  std::vector<NodeCard> cards{{state_.Cards()[0], 24576, "", {}}};
  auto new_claims = PreparedClaims::Open(dir_.path() + "/state/checkpoint.json").value();
  Preparer new_preparer(config_, "node-a", cards, state_, *new_claims, api_);
  KubeletPlugin old_instance(config_, "node-a", *preparer_, state_, {kOld, dir_.path() + "/old.ready"});
  KubeletPlugin new_instance(config_, "node-a", new_preparer, state_, {kNew, dir_.path() + "/new.ready"});
  ASSERT_TRUE(old_instance.Start().ok());
  ASSERT_TRUE(new_instance.Start().ok());
  for (const char* id : {kOld, kNew}) {
    SCOPED_TRACE(id);
    auto registration = pluginregistration::Registration::NewStub(Dial(RegistrationSocketPath(config_, id)));
    pluginregistration::PluginInfo info;
    ASSERT_TRUE(registration->GetInfo(Context().get(), {}, &info).ok());
    EXPECT_EQ(info.name(), "mgpu.io");
    EXPECT_EQ(info.endpoint(), PluginSocketPath(config_, id));
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(true);
    pluginregistration::RegistrationStatusResponse reply;
    ASSERT_TRUE(registration->NotifyRegistrationStatus(Context().get(), status, &reply).ok());
  }
  EXPECT_TRUE(old_instance.Registered() && new_instance.Registered());
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/old.ready"));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/new.ready"));

  api_.Put(test::Claim("c", "u1",
                       json::array({test::Result("gpu-0-fixed", {{"cores", "30"}, {"memory", "4Gi"}})})));
  drapb::NodePrepareResourcesRequest request;
  drapb::Claim* c = request.add_claims();
  c->set_namespace_("default");
  c->set_uid("u1");
  c->set_name("c");
  drapb::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(drapb::DRAPlugin::NewStub(Dial(PluginSocketPath(config_, kOld)))
                  ->NodePrepareResources(Context().get(), request, &prepared)
                  .ok());
  ASSERT_EQ(prepared.claims().at("u1").error(), "");
  // The new instance answers the kubelet's repeated call from the shared checkpoint, reading no claim.
  drapb::NodePrepareResourcesResponse again;
  ASSERT_TRUE(drapb::DRAPlugin::NewStub(Dial(PluginSocketPath(config_, kNew)))
                  ->NodePrepareResources(Context().get(), request, &again)
                  .ok());
  EXPECT_EQ(again.claims().at("u1").SerializeAsString(), prepared.claims().at("u1").SerializeAsString());
  EXPECT_EQ(new_preparer.claim_reads(), 0u);

  old_instance.Stop();
  EXPECT_FALSE(std::filesystem::exists(RegistrationSocketPath(config_, kOld)));
  EXPECT_FALSE(std::filesystem::exists(PluginSocketPath(config_, kOld)));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/old.ready"));
  EXPECT_TRUE(std::filesystem::exists(RegistrationSocketPath(config_, kNew)));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/new.ready"));
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath("u1", config_))) << "the CDI spec stays with the claim";

  drapb::NodeUnprepareResourcesRequest undo;
  *undo.add_claims() = *c;
  drapb::NodeUnprepareResourcesResponse undone;
  ASSERT_TRUE(drapb::DRAPlugin::NewStub(Dial(PluginSocketPath(config_, kNew)))
                  ->NodeUnprepareResources(Context().get(), undo, &undone)
                  .ok());
  EXPECT_EQ(undone.claims().at("u1").error(), "");
  EXPECT_FALSE(std::filesystem::exists(CdiSpecPath("u1", config_)));
  EXPECT_TRUE(claims_->All().empty());
}

// At start an instance removes the sockets nobody answers on of the driver's instances (a SIGKILLed pod's,
// which the kubelet keeps registered) and its own of an earlier run; a live instance's sockets and other
// drivers' stay.
TEST_F(PluginTest, AStartRemovesDeadInstancesSocketsOnly) {
  plugin_->Stop();
  KubeletPlugin live(config_, "node-a", *preparer_, state_, {kOld, ""});
  ASSERT_TRUE(live.Start().ok());
  const std::string registry = config_.dra.kubelet_root_dir + "/plugins_registry/";
  const std::vector<std::string> dead = {RegistrationSocketPath(config_, kDead), PluginSocketPath(config_, kDead),
                                         RegistrationSocketPath(config_), PluginSocketPath(config_)};
  const std::vector<std::string> others = {registry + "mgpu.io-foo-reg.sock", registry + "other.io-reg.sock"};
  for (const std::string& path : dead) DeadSocket(path);
  for (const std::string& path : others) DeadSocket(path);
  // This instance's own sockets of an earlier run (a container restarted in the same pod): replaced.
  DeadSocket(RegistrationSocketPath(config_, kNew));

  KubeletPlugin starting(config_, "node-a", *preparer_, state_, {kNew, ""});
  ASSERT_TRUE(starting.Start().ok());
  for (const std::string& path : dead) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  for (const std::string& path : others) EXPECT_TRUE(std::filesystem::exists(path)) << path;
  for (const char* id : {kOld, kNew}) {
    pluginregistration::PluginInfo info;
    EXPECT_TRUE(pluginregistration::Registration::NewStub(Dial(RegistrationSocketPath(config_, id)))
                    ->GetInfo(Context().get(), {}, &info)
                    .ok())
        << id << " answers";
  }
}

}  // namespace
}  // namespace mgpu::dra
