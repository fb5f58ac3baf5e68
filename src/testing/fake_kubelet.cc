#include "testing/fake_kubelet.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>

#include "kubelet/deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet/podresources/v1/api.grpc.pb.h"

namespace mgpu::test {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);

std::chrono::system_clock::time_point Deadline() { return std::chrono::system_clock::now() + kCallTimeout; }

}  // namespace

// One registered plugin endpoint: its stub and the thread that follows its ListAndWatch stream.
struct Endpoint {
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  std::unique_ptr<grpc::ClientContext> stream_context;
  std::thread stream;
};

class FakeKubelet::Impl final : public v1beta1::Registration::Service,
                                public v1::PodResourcesLister::Service {
 public:
  Impl(std::string dir, std::string pod_resources_socket)
      : dir_(std::move(dir)), pod_resources_socket_(std::move(pod_resources_socket)) {
    // gRPC stays initialised for the life of the process: shutting it down when the last server goes (in a
    // test's teardown, or between restarts) waits out its pollers' timers, up to the 10 s call deadline.
    static const bool kInitialised = (grpc_init(), true);
    (void)kInitialised;
  }

  ~Impl() override { Stop(); }

  Status Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + (std::filesystem::path(dir_) / "kubelet.sock").string(),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(static_cast<v1beta1::Registration::Service*>(this));
    registration_server_ = builder.BuildAndStart();
    if (!registration_server_) return Error{"fake kubelet cannot serve kubelet.sock in " + dir_};
    if (!pod_resources_server_) {
      std::error_code ec;
      std::filesystem::remove(pod_resources_socket_, ec);
      grpc::ServerBuilder pr;
      pr.AddListeningPort("unix:" + pod_resources_socket_, grpc::InsecureServerCredentials());
      pr.RegisterService(static_cast<v1::PodResourcesLister::Service*>(this));
      pod_resources_server_ = pr.BuildAndStart();
      if (!pod_resources_server_) return Error{"fake kubelet cannot serve " + pod_resources_socket_};
    }
    return Status::Ok();
  }

  // Stops the registration server and the streams; the PodResources server stays (its socket is elsewhere).
  void StopRegistration() {
    if (registration_server_) {
      registration_server_->Shutdown(Deadline());
      registration_server_.reset();
    }
    std::map<std::string, Endpoint> endpoints;
    {
      std::lock_guard lock(mu_);
      endpoints.swap(endpoints_);
    }
    for (auto& [name, e] : endpoints) Close(e);
  }

  void Stop() {
    PausePodResources(false);
    StopRegistration();
    if (pod_resources_server_) {
      pod_resources_server_->Shutdown(Deadline());
      pod_resources_server_.reset();
    }
  }

  Status Restart() {
    StopRegistration();
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.is_socket()) std::filesystem::remove(entry.path());
    }
    return Start();
  }

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    Endpoint e;
    auto channel = grpc::CreateChannel("unix:" + (std::filesystem::path(dir_) / request->endpoint()).string(),
                                       grpc::InsecureChannelCredentials());
    e.stub = v1beta1::DevicePlugin::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1beta1::DevicePluginOptions options;
    const grpc::Status status = e.stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options);
    if (!status.ok())
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "cannot dial the plugin back: " + status.error_message());
    const std::string resource = request->resource_name();
    e.stream_context = std::make_unique<grpc::ClientContext>();
    e.stream = std::thread([this, resource, stub = e.stub.get(), ctx = e.stream_context.get()] {
      Follow(resource, *stub, *ctx);
    });
    Endpoint old;
    {
      std::lock_guard lock(mu_);
      registrations_.push_back(Registration{request->version(), request->endpoint(), resource,
                                            request->options().get_preferred_allocation_available()});
      old = std::move(endpoints_[resource]);
      endpoints_[resource] = std::move(e);
    }
    changed_.notify_all();
    Close(old);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::unique_lock lock(mu_);
    ++pod_resources_lists_;
    changed_.wait(lock, [this] { return !pod_resources_paused_; });
    std::map<std::pair<std::string, std::string>, v1::PodResources*> pods;
    for (const auto& [key, ids] : allocated_) {
      const auto& [ns, pod, container, resource] = key;
      auto*& p = pods[{ns, pod}];
      if (!p) {
        p = response->add_pod_resources();
        p->set_namespace_(ns);
        p->set_name(pod);
      }
      auto it =
          std::find_if(p->mutable_containers()->begin(), p->mutable_containers()->end(),
                       [&name = container](const v1::ContainerResources& c) { return c.name() == name; });
      v1::ContainerResources* c = it != p->mutable_containers()->end() ? &*it : p->add_containers();
      c->set_name(container);
      auto* d = c->add_devices();
      d->set_resource_name(resource);
      for (const auto& id : ids) d->add_device_ids(id);
    }
    return grpc::Status::OK;
  }

  Result<Admission> Admit(const std::string& ns, const std::string& pod, const std::string& container,
                          const std::map<std::string, int64_t>& resources, std::mt19937& rng) {
    std::vector<std::string> order;
    for (const auto& [name, amount] : resources) order.push_back(name);
    std::shuffle(order.begin(), order.end(), rng);
    Admission out;
    std::set<std::string> mount_paths;
    for (const std::string& resource : order) {
      const int64_t size = resources.at(resource);
      v1beta1::DevicePlugin::Stub* stub = nullptr;
      std::set<std::string> available;
      {
        std::lock_guard lock(mu_);
        auto e = endpoints_.find(resource);
        if (e == endpoints_.end()) return Error{"no plugin registered for " + resource};
        stub = e->second.stub.get();
        std::set<std::string> taken;
        for (const auto& [key, ids] : allocated_) {
          if (std::get<3>(key) == resource) taken.insert(ids.begin(), ids.end());
        }
        for (const auto& [id, health] : lists_[resource].devices) {
          if (health == "Healthy" && !taken.count(id)) available.insert(id);
        }
      }
      v1beta1::PreferredAllocationRequest preferred_request;
      auto* cr = preferred_request.add_container_requests();
      for (const auto& id : available) cr->add_available_deviceids(id);
      cr->set_allocation_size(static_cast<int32_t>(size));
      v1beta1::PreferredAllocationResponse preferred;
      const auto preferred_start = std::chrono::steady_clock::now();
      {
        grpc::ClientContext context;
        context.set_deadline(Deadline());
        const grpc::Status s = stub->GetPreferredAllocation(&context, preferred_request, &preferred);
        if (!s.ok()) return Error{resource + " GetPreferredAllocation: " + s.error_message()};
      }
      auto call_time = std::chrono::steady_clock::now() - preferred_start;
      if (preferred.container_responses_size() != 1)
        return Error{resource + ": preferred allocation has no answer"};
      std::vector<std::string> ids(preferred.container_responses(0).deviceids().begin(),
                                   preferred.container_responses(0).deviceids().end());
      if (static_cast<int64_t>(ids.size()) != size)
        return Error{resource + ": preferred allocation has the wrong size"};
      for (const auto& id : ids) {
        if (!available.count(id)) return Error{resource + ": preferred device " + id + " is not available"};
      }
      v1beta1::AllocateRequest allocate_request;
      auto* ar = allocate_request.add_container_requests();
      for (const auto& id : ids) ar->add_devices_ids(id);
      v1beta1::AllocateResponse allocated;
      const auto allocate_start = std::chrono::steady_clock::now();
      {
        grpc::ClientContext context;
        context.set_deadline(Deadline());
        const grpc::Status s = stub->Allocate(&context, allocate_request, &allocated);
        if (!s.ok()) return Error{resource + " Allocate: " + s.error_message()};
      }
      call_time += std::chrono::steady_clock::now() - allocate_start;
      out.call_time[resource] = std::chrono::duration_cast<std::chrono::nanoseconds>(call_time);
      if (allocated.container_responses_size() != 1) return Error{resource + ": Allocate has no answer"};
      const auto& response = allocated.container_responses(0);
      for (const auto& [k, v] : response.envs()) {
        auto [it, inserted] = out.envs.emplace(k, v);
        if (!inserted && it->second != v) out.env_conflicts.push_back(k);
      }
      for (const auto& m : response.mounts()) {
        if (mount_paths.insert(m.container_path()).second)
          out.mounts.push_back(Mount{m.container_path(), m.host_path(), m.read_only()});
      }
      out.devices[resource] = ids;
      out.order.push_back(resource);
      std::lock_guard lock(mu_);
      allocated_[{ns, pod, container, resource}] = ids;
    }
    return out;
  }

  void PausePodResources(bool paused) {
    {
      std::lock_guard lock(mu_);
      pod_resources_paused_ = paused;
    }
    changed_.notify_all();
  }

  void Hold(const std::string& ns, const std::string& pod, const std::string& container,
            const std::string& resource, std::vector<std::string> ids) {
    std::lock_guard lock(mu_);
    allocated_[{ns, pod, container, resource}] = std::move(ids);
  }

  void Release(const std::string& ns, const std::string& pod) {
    std::lock_guard lock(mu_);
    std::erase_if(allocated_, [&](const auto& entry) {
      return std::get<0>(entry.first) == ns && std::get<1>(entry.first) == pod;
    });
  }

  std::vector<Registration> Registrations() const {
    std::lock_guard lock(mu_);
    return registrations_;
  }

  bool WaitForRegistrations(size_t total, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return registrations_.size() >= total; });
  }

  std::map<std::string, std::string> Devices(const std::string& resource) const {
    std::lock_guard lock(mu_);
    auto it = lists_.find(resource);
    return it == lists_.end() ? std::map<std::string, std::string>() : it->second.devices;
  }

  size_t ListsReceived(const std::string& resource) const {
    std::lock_guard lock(mu_);
    auto it = lists_.find(resource);
    return it == lists_.end() ? 0 : it->second.count;
  }

  bool WaitForListsReceived(const std::string& resource, size_t count,
                            std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] {
      auto it = lists_.find(resource);
      return it != lists_.end() && it->second.count >= count;
    });
  }

  size_t LastListBytes(const std::string& resource) const {
    std::lock_guard lock(mu_);
    auto it = lists_.find(resource);
    return it == lists_.end() ? 0 : it->second.bytes;
  }

  size_t PodResourcesLists() const {
    std::lock_guard lock(mu_);
    return pod_resources_lists_;
  }

  bool WaitForLists(const std::string& resource,
                    const std::function<bool(const std::map<std::string, std::string>&)>& done,
                    std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] {
      auto it = lists_.find(resource);
      return it != lists_.end() && it->second.count > 0 && done(it->second.devices);
    });
  }

 private:
  struct ReceivedList {
    std::map<std::string, std::string> devices;
    size_t count = 0;
    size_t bytes = 0;
  };

  void Follow(const std::string& resource, v1beta1::DevicePlugin::Stub& stub, grpc::ClientContext& context) {
    auto reader = stub.ListAndWatch(&context, v1beta1::Empty());
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      {
        std::lock_guard lock(mu_);
        ReceivedList& l = lists_[resource];
        l.devices.clear();
        for (const auto& d : response.devices()) l.devices[d.id()] = d.health();
        l.count++;
        l.bytes = response.ByteSizeLong();
      }
      changed_.notify_all();
    }
    reader->Finish();
  }

  static void Close(Endpoint& e) {
    if (e.stream_context) e.stream_context->TryCancel();
    if (e.stream.joinable()) e.stream.join();
  }

  const std::string dir_;
  const std::string pod_resources_socket_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::unique_ptr<grpc::Server> pod_resources_server_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Registration> registrations_;
  std::map<std::string, Endpoint> endpoints_;
  std::map<std::string, ReceivedList> lists_;
  size_t pod_resources_lists_ = 0;
  bool pod_resources_paused_ = false;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, std::vector<std::string>>
      allocated_;
};

FakeKubelet::FakeKubelet(std::string dir, std::string pod_resources_socket)
    : impl_(std::make_unique<Impl>(std::move(dir), std::move(pod_resources_socket))) {}
FakeKubelet::~FakeKubelet() = default;
Status FakeKubelet::Start() { return impl_->Start(); }
void FakeKubelet::Stop() { impl_->Stop(); }
Status FakeKubelet::Restart() { return impl_->Restart(); }
std::vector<FakeKubelet::Registration> FakeKubelet::Registrations() const { return impl_->Registrations(); }
bool FakeKubelet::WaitForRegistrations(size_t total, std::chrono::milliseconds timeout) const {
  return impl_->WaitForRegistrations(total, timeout);
}
std::map<std::string, std::string> FakeKubelet::Devices(const std::string& resource) const {
  return impl_->Devices(resource);
}
size_t FakeKubelet::ListsReceived(const std::string& resource) const {
  return impl_->ListsReceived(resource);
}
bool FakeKubelet::WaitForListsReceived(const std::string& resource, size_t count,
                                       std::chrono::milliseconds timeout) const {
  return impl_->WaitForListsReceived(resource, count, timeout);
}
size_t FakeKubelet::LastListBytes(const std::string& resource) const {
  return impl_->LastListBytes(resource);
}
size_t FakeKubelet::PodResourcesLists() const { return impl_->PodResourcesLists(); }
bool FakeKubelet::WaitForLists(const std::string& resource,
                               const std::function<bool(const std::map<std::string, std::string>&)>& done,
                               std::chrono::milliseconds timeout) const {
  return impl_->WaitForLists(resource, done, timeout);
}
Result<FakeKubelet::Admission> FakeKubelet::Admit(const std::string& pod_namespace, const std::string& pod,
                                                  const std::string& container,
                                                  const std::map<std::string, int64_t>& resources,
                                                  std::mt19937& rng) {
  return impl_->Admit(pod_namespace, pod, container, resources, rng);
}
void FakeKubelet::PausePodResources(bool paused) { impl_->PausePodResources(paused); }
void FakeKubelet::Hold(const std::string& pod_namespace, const std::string& pod, const std::string& container,
                       const std::string& resource, std::vector<std::string> device_ids) {
  impl_->Hold(pod_namespace, pod, container, resource, std::move(device_ids));
}
void FakeKubelet::Release(const std::string& pod_namespace, const std::string& pod) {
  impl_->Release(pod_namespace, pod);
}

}  // namespace mgpu::test
