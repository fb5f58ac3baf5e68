#include "dra/plugin.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/dra.h"
#include "dra/health.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/pluginregistration/v1/api.grpc.pb.h"

namespace mgpu::dra {
namespace {

namespace fs = std::filesystem;
namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;

constexpr auto kShutdownGrace = std::chrono::seconds(2);

ClaimRef RefOf(const drapb::Claim& c) { return ClaimRef{c.namespace_(), c.uid(), c.name()}; }

}  // namespace

std::string PluginSocketPath(const Config& config) {
  return (fs::path(config.dra.kubelet_root_dir) / "plugins" / DriverName(config) / "dra.sock").string();
}

std::string RegistrationSocketPath(const Config& config) {
  return (fs::path(config.dra.kubelet_root_dir) / "plugins_registry" / (DriverName(config) + "-reg.sock"))
      .string();
}

class KubeletPlugin::DraService final : public drapb::DRAPlugin::Service {
 public:
  explicit DraService(Preparer& preparer) : preparer_(preparer) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*, const drapb::NodePrepareResourcesRequest* request,
                                    drapb::NodePrepareResourcesResponse* response) override {
    for (const drapb::Claim& c : request->claims()) {
      const PrepareOutcome outcome = preparer_.Prepare(RefOf(c));
      drapb::NodePrepareResourceResponse& out = (*response->mutable_claims())[c.uid()];
      if (!outcome.error.empty()) {
        spdlog::error("claim={}/{} uid={} NodePrepareResources refused: {}", c.namespace_(), c.name(),
                      c.uid(), outcome.error);
        out.set_error(outcome.error);
        continue;
      }
      for (const PreparedDevice& d : outcome.devices) {
        drapb::Device* device = out.add_devices();
        for (const std::string& r : d.requests) device->add_request_names(r);
        device->set_pool_name(d.pool);
        device->set_device_name(d.device);
        for (const std::string& id : d.cdi_ids) device->add_cdi_device_ids(id);
        if (!d.share_id.empty()) device->set_share_id(d.share_id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const drapb::NodeUnprepareResourcesRequest* request,
                                      drapb::NodeUnprepareResourcesResponse* response) override {
    for (const drapb::Claim& c : request->claims()) {
      const std::string error = preparer_.Unprepare(RefOf(c));
      drapb::NodeUnprepareResourceResponse& out = (*response->mutable_claims())[c.uid()];
      if (!error.empty()) {
        spdlog::error("claim={}/{} uid={} NodeUnprepareResources failed: {}", c.namespace_(), c.name(),
                      c.uid(), error);
        out.set_error(error);
      }
    }
    return grpc::Status::OK;
  }

 private:
  Preparer& preparer_;
};

class KubeletPlugin::RegistrationService final : public pluginregistration::Registration::Service {
 public:
  RegistrationService(const Config& config, std::atomic<bool>& registered, std::atomic<uint64_t>& calls)
      : driver_(DriverName(config)),
        endpoint_(PluginSocketPath(config)),
        registered_(registered),
        calls_(calls) {}

  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override {
    info->set_type(kDraPluginType);
    info->set_name(driver_);
    info->set_endpoint(endpoint_);
    info->add_supported_versions(kDraPluginVersion);
    calls_++;
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override {
    registered_ = status->plugin_registered();
    if (status->plugin_registered()) {
      spdlog::info("driver={} registered with the kubelet", driver_);
    } else {
      spdlog::error("driver={} the kubelet refused the registration: {}", driver_, status->error());
    }
    return grpc::Status::OK;
  }

 private:
  const std::string driver_;
  const std::string endpoint_;
  std::atomic<bool>& registered_;
  std::atomic<uint64_t>& calls_;
};

KubeletPlugin::KubeletPlugin(const Config& config, std::string pool, Preparer& preparer,
                             const dp::DeviceState& state)
    : config_(config), pool_(std::move(pool)), preparer_(preparer), state_(state) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

Status KubeletPlugin::Start() {
  std::lock_guard lock(mu_);
  if (plugin_server_) return Error{"the DRA kubelet plugin was started already"};
  const std::string plugin = PluginSocketPath(config_), registration = RegistrationSocketPath(config_);
  for (const std::string& path : {plugin, registration}) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return Error{"cannot create " + fs::path(path).parent_path().string() + ": " + ec.message()};
    fs::remove(path, ec);  // a stale socket from an earlier run blocks bind
  }
  dra_ = std::make_unique<DraService>(preparer_);
  health_ = std::make_unique<HealthService>(pool_, PublishedVariants(config_), state_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + plugin, grpc::InsecureServerCredentials());
  builder.RegisterService(dra_.get());
  builder.RegisterService(health_.get());
  plugin_server_ = builder.BuildAndStart();
  if (!plugin_server_) return Error{"cannot serve the DRA plugin on " + plugin};

  registration_ = std::make_unique<RegistrationService>(config_, registered_, registrations_);
  grpc::ServerBuilder reg;
  reg.AddListeningPort("unix:" + registration, grpc::InsecureServerCredentials());
  reg.RegisterService(registration_.get());
  registration_server_ = reg.BuildAndStart();
  if (!registration_server_) return Error{"cannot serve the plugin registration on " + registration};
  spdlog::info("driver={} serving on {}, registration on {}", DriverName(config_), plugin, registration);
  return Status::Ok();
}

void KubeletPlugin::Stop() {
  std::lock_guard lock(mu_);
  if (health_) health_->Stop();
  const auto deadline = std::chrono::system_clock::now() + kShutdownGrace;
  if (registration_server_) {
    registration_server_->Shutdown(deadline);
    registration_server_->Wait();
    std::error_code ec;
    fs::remove(RegistrationSocketPath(config_), ec);
  }
  if (plugin_server_) {
    plugin_server_->Shutdown(deadline);
    plugin_server_->Wait();
  }
  registration_server_.reset();
  plugin_server_.reset();
  registered_ = false;
}

}  // namespace mgpu::dra
