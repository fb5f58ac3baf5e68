#include "dra/plugin.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

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

std::string PluginSocketPath(const Config& config, const std::string& instance) {
  return (fs::path(config.dra.kubelet_root_dir) / "plugins" / DriverName(config) /
          ("dra" + (instance.empty() ? "" : "-" + instance) + ".sock"))
      .string();
}

std::string RegistrationSocketPath(const Config& config, const std::string& instance) {
  return (fs::path(config.dra.kubelet_root_dir) / "plugins_registry" /
          (DriverName(config) + (instance.empty() ? "" : "-" + instance) + "-reg.sock"))
      .string();
}

namespace {

// A pod UID as the API server writes it (8-4-4-4-12 hex digits): the only ids whose sockets are recognised
// as another instance's, so that no other driver's socket whose name happens to start the same is touched.
bool IsInstanceId(const std::string& id) {
  static const std::regex uid("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  return std::regex_match(id, uid);
}

// The instance id in `file` when it is one of the driver's socket names `prefix`[-<id>]`suffix`.
std::optional<std::string> InstanceOf(const std::string& file, const std::string& prefix,
                                      const std::string& suffix) {
  if (file == prefix + suffix) return "";
  if (file.size() <= prefix.size() + suffix.size() + 1 || file.rfind(prefix + "-", 0) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::string id = file.substr(prefix.size() + 1, file.size() - prefix.size() - 1 - suffix.size());
  if (!IsInstanceId(id)) return std::nullopt;
  return id;
}

// Someone accepts connections on the unix socket at `path`.
bool Answers(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // cannot tell: keep it
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    close(fd);
    return true;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int err = errno;
  close(fd);
  return rc == 0 || (err != ECONNREFUSED && err != ENOENT);
}

}  // namespace

bool InstanceAnswers(const Config& config, const std::string& id) {
  const std::string path = RegistrationSocketPath(config, id);
  std::error_code ec;
  return fs::exists(path, ec) && Answers(path);
}

std::vector<std::string> RemoveStaleSockets(const Config& config, const std::string& instance) {
  std::vector<std::string> removed;
  const std::pair<fs::path, std::pair<std::string, std::string>> places[] = {
      {fs::path(PluginSocketPath(config)).parent_path(), {"dra", ".sock"}},
      {fs::path(RegistrationSocketPath(config)).parent_path(), {DriverName(config), "-reg.sock"}}};
  for (const auto& [folder, name] : places) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
      const auto id = InstanceOf(e.path().filename().string(), name.first, name.second);
      if (!id || !e.is_socket(ec)) continue;
      if (*id != instance && Answers(e.path().string())) continue;
      if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
    }
  }
  return removed;
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
  RegistrationService(const Config& config, const PluginInstance& instance, std::atomic<bool>& registered,
                      std::atomic<uint64_t>& calls)
      : driver_(DriverName(config)),
        endpoint_(PluginSocketPath(config, instance.id)),
        ready_file_(instance.ready_file),
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
      spdlog::info("driver={} endpoint={} registered with the kubelet", driver_, endpoint_);
      if (!ready_file_.empty() && !std::ofstream(ready_file_))
        spdlog::error("driver={} cannot write the ready file {}", driver_, ready_file_);
    } else {
      spdlog::error("driver={} the kubelet refused the registration: {}", driver_, status->error());
      std::error_code ec;
      if (!ready_file_.empty()) fs::remove(ready_file_, ec);
    }
    return grpc::Status::OK;
  }

 private:
  const std::string driver_;
  const std::string endpoint_;
  const std::string ready_file_;
  std::atomic<bool>& registered_;
  std::atomic<uint64_t>& calls_;
};

KubeletPlugin::KubeletPlugin(const Config& config, std::string pool, Preparer& preparer,
                             const node::DeviceState& state, PluginInstance instance)
    : config_(config),
      pool_(std::move(pool)),
      instance_(std::move(instance)),
      preparer_(preparer),
      state_(state) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

Status KubeletPlugin::Start() {
  std::lock_guard lock(mu_);
  if (plugin_server_) return Error{"the DRA kubelet plugin was started already"};
  const std::string plugin = PluginSocketPath(config_, instance_.id),
                    registration = RegistrationSocketPath(config_, instance_.id);
  for (const std::string& path : {plugin, registration}) {
    if (path.size() >= sizeof(sockaddr_un::sun_path))
      return Error{"the socket path " + path + " is longer than the " +
                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                   " characters a unix socket's name may have (shorten dra.kubeletRootDir)"};
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return Error{"cannot create " + fs::path(path).parent_path().string() + ": " + ec.message()};
  }
  if (!instance_.ready_file.empty()) {
    std::error_code ec;
    fs::remove(instance_.ready_file, ec);
  }
  // This instance's sockets of an earlier run block bind; a dead instance's keep a registration in the kubelet.
  for (const std::string& path : RemoveStaleSockets(config_, instance_.id))
    spdlog::info("driver={} removed the stale socket {}", DriverName(config_), path);
  dra_ = std::make_unique<DraService>(preparer_);
  health_ = std::make_unique<HealthService>(pool_, PublishedVariants(config_), state_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + plugin, grpc::InsecureServerCredentials());
  builder.RegisterService(dra_.get());
  builder.RegisterService(health_.get());
  plugin_server_ = builder.BuildAndStart();
  if (!plugin_server_) return Error{"cannot serve the DRA plugin on " + plugin};

  registration_ = std::make_unique<RegistrationService>(config_, instance_, registered_, registrations_);
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
  std::error_code ec;
  if (registration_server_) {
    registration_server_->Shutdown(deadline);
    registration_server_->Wait();
    fs::remove(RegistrationSocketPath(config_, instance_.id), ec);
    if (!instance_.ready_file.empty()) fs::remove(instance_.ready_file, ec);
  }
  if (plugin_server_) {
    plugin_server_->Shutdown(deadline);
    plugin_server_->Wait();
    fs::remove(PluginSocketPath(config_, instance_.id), ec);
  }
  registration_server_.reset();
  plugin_server_.reset();
  registered_ = false;
}

}  // namespace mgpu::dra
