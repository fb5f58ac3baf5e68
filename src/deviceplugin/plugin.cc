#include "deviceplugin/plugin.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "deviceplugin/device_list.h"
#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "node/environment.h"

namespace mgpu::dp {
namespace {

constexpr const char* kKubeletSocket = "kubelet.sock";
constexpr auto kRegisterTimeout = std::chrono::seconds(10);
// A failed registration is retried after 100 ms, then twice as long each time, up to 5 s: the kubelet
// creates kubelet.sock a moment before it listens on it.
constexpr auto kFirstRegisterRetry = std::chrono::milliseconds(100);
constexpr auto kMaxRegisterRetry = std::chrono::milliseconds(5000);
// How often a ListAndWatch stream notices its kubelet has gone.
constexpr auto kStreamCheck = std::chrono::milliseconds(500);
constexpr auto kShutdownGrace = std::chrono::seconds(2);

size_t Slot(Resource r) { return static_cast<size_t>(r); }

std::string SocketName(Resource resource, const ResourceNames& names) {
  std::string name = FullName(resource, names);
  std::replace(name.begin(), name.end(), '/', '_');
  return name + ".sock";
}

// Who a call served, as far as the plugin can know: the kubelet names no pod, so for a look-alike pool only
// the pool is known.
std::string Whom(const PendingContainer& c) {
  if (c.pool_size > 1) return "pool of " + std::to_string(c.pool_size) + " look-alikes";
  return "pod=" + c.pod + " container=" + c.container;
}

std::vector<std::string> Uuids(const std::vector<Card>& cards) {
  std::vector<std::string> out;
  for (const Card& c : cards) out.push_back(c.uuid);
  return out;
}

}  // namespace

class DevicePlugin::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(Resource resource, const Config& config, node::DeviceState& state, HandOff& hand_off,
          PendingPods* pods, Counters& counts)
      : resource_(resource),
        name_(FullName(resource, config.Names())),
        config_(config),
        state_(state),
        hand_off_(hand_off),
        pods_(pods),
        counts_(counts) {}

  void Stop() {
    stopping_ = true;
    state_.Wake();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    options->set_pre_start_required(false);
    options->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    uint64_t sent = state_.Generation() - 1;  // anything but the current one: send at once
    while (true) {
      auto [generation, cards] = state_.WaitForChange(
          sent, kStreamCheck, [&] { return stopping_.load() || context->IsCancelled(); });
      if (stopping_ || context->IsCancelled()) return grpc::Status::OK;
      if (generation == sent) continue;
      const auto list = BuildDeviceList(cards, resource_, config_);
      if (!writer->Write(list)) {
        spdlog::info("resource={} ListAndWatch stream closed by the kubelet", name_);
        return grpc::Status::OK;
      }
      spdlog::info("resource={} sent {} devices (generation {})", name_, list.devices_size(), generation);
      sent = generation;
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    const std::vector<Card> cards = state_.Cards();
    for (const auto& c : request->container_requests()) {
      counts_.preferred++;
      PreferredRequest r;
      r.available.assign(c.available_deviceids().begin(), c.available_deviceids().end());
      r.must_include.assign(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
      r.size = c.allocation_size();
      const auto candidates = pods_ ? pods_->Candidates(resource_, r.size) : std::vector<PendingContainer>();
      const auto just = hand_off_.JustAllocated(resource_, HandOff::Clock::now());
      auto preference = ChoosePreferred(resource_, r, candidates, just, cards, config_);
      if (!preference.ok()) {
        counts_.preferred_errors++;
        spdlog::error("resource={} size={} GetPreferredAllocation failed: {}", name_, r.size,
                      preference.message());
        if (pods_) {
          pods_->Refused(resource_, nullptr,
                         "GetPreferredAllocation of " + std::to_string(r.size) + " " + name_ +
                             " devices failed: " + preference.message());
        }
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, preference.message());
      }
      std::string whom = "pod=(none: allocator's choice)";
      if (!preference->pod.empty()) {
        counts_.preferred_matched++;
        for (const PendingContainer& candidate : candidates) {
          if (candidate.pod != preference->pod || candidate.container != preference->container) continue;
          hand_off_.Matched(resource_, preference->device_ids, candidate);
          whom = Whom(candidate);
        }
      }
      spdlog::info("resource={} size={} {} preferred {} devices", name_, r.size, whom,
                   preference->device_ids.size());
      auto* out = response->add_container_responses();
      for (auto& id : preference->device_ids) out->add_deviceids(std::move(id));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    const std::vector<Card> cards = state_.Cards();
    for (const auto& c : request->container_requests()) {
      counts_.allocate++;
      const std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
      auto allocation = ReadAllocation(resource_, ids, cards, config_);
      if (!allocation.ok()) {
        const std::optional<PendingContainer> matched = hand_off_.Refused(resource_, ids);
        counts_.allocate_errors++;
        spdlog::error("resource={} {} Allocate refused: {}", name_,
                      matched ? Whom(*matched) : "pod=(unknown)", allocation.message());
        if (pods_) {
          pods_->Refused(resource_, matched ? &*matched : nullptr,
                         "Allocate of " + name_ + " failed: " + allocation.message());
        }
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, allocation.message());
      }
      const auto uuids = Uuids(allocation->cards);
      const HandOffLedger::Allocation handed =
          hand_off_.Allocated(resource_, ids, uuids, HandOff::Clock::now());
      const auto env = node::BuildEnvironment(*allocation, config_.isolation, config_.default_compute_policy);
      auto* out = response->add_container_responses();
      for (const auto& [k, v] : env.envs) (*out->mutable_envs())[k] = v;
      for (const auto& m : env.mounts) {
        auto* mount = out->add_mounts();
        mount->set_container_path(m.container_path);
        mount->set_host_path(m.host_path);
        mount->set_read_only(m.read_only);
      }
      std::string joined;
      for (const auto& u : uuids) joined += (joined.empty() ? "" : ",") + u;
      if (handed.split) {
        // Only a pod admitted without the extender gets here: its first resource was placed not knowing
        // the size of the second.
        counts_.split++;
        spdlog::warn(
            "resource={} card={} differs from the cards the container's previous resource got: "
            "schedule GPU pods through the mgpu scheduler extender",
            name_, joined);
      }
      spdlog::info("resource={} {} card={} amount_per_card={} allocated", name_,
                   handed.matched ? Whom(*handed.matched) : "pod=(unknown)", joined, allocation->per_card);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  const Resource resource_;
  const std::string name_;
  const Config& config_;
  node::DeviceState& state_;
  HandOff& hand_off_;
  PendingPods* const pods_;
  Counters& counts_;
  std::atomic<bool> stopping_{false};
};

DevicePlugin::DevicePlugin(Config config, node::DeviceState& state, HandOff& hand_off, PendingPods* pods)
    : config_(std::move(config)), state_(state), hand_off_(hand_off), pods_(pods) {}

DevicePlugin::~DevicePlugin() { Stop(); }

std::string DevicePlugin::SocketPath(Resource resource) const {
  return (std::filesystem::path(config_.device_plugin.device_plugin_dir) /
          SocketName(resource, config_.Names()))
      .string();
}

CallCounts DevicePlugin::Counts(Resource resource) const {
  const Counters& c = counts_[Slot(resource)];
  return CallCounts{c.preferred, c.preferred_matched, c.preferred_errors,
                    c.allocate,  c.allocate_errors,   c.split};
}

Status DevicePlugin::Start() {
  if (Status s = CheckListAndWatchSize(state_.Cards(), config_); !s.ok()) return s;
  const std::string& dir = config_.device_plugin.device_plugin_dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return Error{"the kubelet's device plugin folder " + dir + " does not exist"};
  // Watch before the first registration, so a kubelet starting meanwhile is not missed.
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || stop_fd_ < 0 ||
      inotify_add_watch(inotify_fd_, dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
    const std::string why = std::strerror(errno);
    Stop();
    return Error{"cannot watch " + dir + " for kubelet restarts: " + why};
  }
  if (Status s = StartServers(); !s.ok()) {
    Stop();
    return s;
  }
  RegisterAll();
  watcher_.Start([this] { WatchKubelet(); });
  return Status::Ok();
}

void DevicePlugin::Stop() {
  watcher_.Stop([this] {
    if (stop_fd_ < 0) return;
    const uint64_t one = 1;
    [[maybe_unused]] auto n = write(stop_fd_, &one, sizeof one);
  });
  StopServers();
  if (inotify_fd_ >= 0) close(inotify_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  inotify_fd_ = stop_fd_ = -1;
}

Status DevicePlugin::StartServers() {
  std::lock_guard lock(servers_mu_);
  for (Resource r : kAllResources) {
    const std::string path = SocketPath(r);
    std::error_code ec;
    std::filesystem::remove(path, ec);  // a stale socket from an earlier run blocks bind
    auto service = std::make_unique<Service>(r, config_, state_, hand_off_, pods_, counts_[Slot(r)]);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) return Error{"cannot serve " + FullName(r, config_.Names()) + " on " + path};
    spdlog::info("resource={} serving on {}", FullName(r, config_.Names()), path);
    services_.push_back(std::move(service));
    servers_.push_back(std::move(server));
  }
  serving_ = true;
  return Status::Ok();
}

void DevicePlugin::StopServers() {
  std::lock_guard lock(servers_mu_);
  serving_ = false;
  registered_ = false;
  for (auto& s : services_) s->Stop();
  for (auto& s : servers_) s->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  for (auto& s : servers_) s->Wait();
  servers_.clear();
  services_.clear();
}

bool DevicePlugin::RegisterAll() {
  const std::string kubelet =
      (std::filesystem::path(config_.device_plugin.device_plugin_dir) / kKubeletSocket).string();
  auto channel = grpc::CreateChannel("unix:" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  bool all = true;
  for (Resource r : kAllResources) {
    const std::string name = FullName(r, config_.Names());
    v1beta1::RegisterRequest request;
    request.set_version("v1beta1");
    request.set_endpoint(SocketName(r, config_.Names()));
    request.set_resource_name(name);
    request.mutable_options()->set_get_preferred_allocation_available(true);
    v1beta1::Empty reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kRegisterTimeout);
    const grpc::Status status = stub->Register(&context, request, &reply);
    if (status.ok()) {
      spdlog::info("resource={} registered with the kubelet at {}", name, kubelet);
    } else {
      spdlog::warn("resource={} cannot register with the kubelet at {}: {}", name, kubelet,
                   status.error_message());
      all = false;
    }
  }
  registered_ = all;
  return all;
}

void DevicePlugin::WatchKubelet() {
  alignas(inotify_event) char buffer[4096];
  auto retry = kFirstRegisterRetry;
  while (true) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int timeout = registered_ ? -1 : static_cast<int>(retry.count());
    const int n = poll(fds, 2, timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("watching {} failed: {}", config_.device_plugin.device_plugin_dir, std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    bool kubelet_restarted = false;
    if (n > 0 && fds[0].revents) {
      ssize_t len;
      while ((len = read(inotify_fd_, buffer, sizeof buffer)) > 0) {
        for (char* p = buffer; p < buffer + len;) {
          auto* e = reinterpret_cast<inotify_event*>(p);
          if (e->len > 0 && std::strcmp(e->name, kKubeletSocket) == 0) kubelet_restarted = true;
          p += sizeof(inotify_event) + e->len;
        }
      }
    }
    if (kubelet_restarted) {
      // The kubelet deleted every socket in the folder when it restarted: serve anew, then register.
      spdlog::info("kubelet.sock was created again: the kubelet restarted; serving and registering again");
      StopServers();
      if (Status s = StartServers(); !s.ok()) {
        spdlog::error("cannot serve again after the kubelet restarted: {}", s.message());
        continue;
      }
      retry = kFirstRegisterRetry;
      RegisterAll();
    } else if (n == 0 && !registered_ && serving_) {
      retry = RegisterAll() ? kFirstRegisterRetry : std::min(2 * retry, kMaxRegisterRetry);
    }
  }
}

}  // namespace mgpu::dp
