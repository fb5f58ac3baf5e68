#include "deviceplugin/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "deviceplugin/devices.h"
#include "kubelet/podresources/v1/api.grpc.pb.h"
#include "kubelet/podresources/v1/api.pb.h"

namespace mgpu::dp {

AllocatedPods ReadAllocatedPods(const v1::ListPodResourcesResponse& response, const Config& config) {
  const ResourceNames names = config.Names();
  std::map<std::string, Resource> ours;
  for (Resource r : kAllResources) ours[FullName(r, names)] = r;
  AllocatedPods out;
  for (const auto& pod : response.pod_resources()) {
    Assignment assignment;
    for (const auto& container : pod.containers()) {
      ContainerAssignment ca{container.name(), {}};
      for (const auto& devices : container.devices()) {
        auto r = ours.find(devices.resource_name());
        if (r == ours.end()) continue;
        for (const auto& id : devices.device_ids()) {
          auto parsed = ParseDeviceId(id);
          if (!parsed.ok() || parsed->resource != r->second) continue;
          auto share = std::find_if(ca.cards.begin(), ca.cards.end(),
                                    [&](const CardShare& s) { return s.uuid == parsed->card_uuid; });
          if (share == ca.cards.end())
            share = ca.cards.insert(ca.cards.end(), CardShare{std::string(parsed->card_uuid)});
          switch (r->second) {
            case Resource::kCore:
              share->core += 1;
              break;
            case Resource::kReclaimedCore:
              share->reclaimed_core += 1;
              break;
            case Resource::kMemory:
              share->memory_mib += UnitOf(Resource::kMemory, config);
              break;
          }
        }
      }
      if (!ca.cards.empty()) assignment.containers.push_back(std::move(ca));
    }
    if (!assignment.containers.empty()) out[PodKey(pod.namespace_(), pod.name())] = std::move(assignment);
  }
  return out;
}

void PodResourcesPoller::Start() {
  thread_.Start([this] { Run(); });
}

void PodResourcesPoller::Stop() { thread_.Stop(); }

AllocatedPods PodResourcesPoller::Latest(uint64_t* request) const {
  std::lock_guard lock(mu_);
  if (request) *request = latest_request_;
  return latest_;
}

uint64_t PodResourcesPoller::RequestsStarted() const {
  std::lock_guard lock(mu_);
  return requests_started_;
}

bool PodResourcesPoller::HasAnswer() const {
  std::lock_guard lock(mu_);
  return answered_;
}

bool PodResourcesPoller::WaitForAnswer(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  wake_.wait_for(lock, timeout, [&] { return answered_ || thread_.stopping(); });
  return answered_;
}

void PodResourcesPoller::Run() {
  const std::string& socket = config_.device_plugin.pod_resources_socket;
  auto stub = v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  const auto period = std::chrono::milliseconds(config_.device_plugin.pod_resources_poll_ms);
  bool failing = false;
  std::unique_lock lock(mu_);
  while (!thread_.stopping()) {
    const uint64_t request = ++requests_started_;
    lock.unlock();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListPodResourcesResponse response;
    const grpc::Status status = stub->List(&context, v1::ListPodResourcesRequest(), &response);
    if (!status.ok() && !failing)
      spdlog::warn("cannot list pod resources at {}: {}", socket, status.error_message());
    failing = !status.ok();
    auto pods = status.ok() ? ReadAllocatedPods(response, config_) : AllocatedPods();
    lock.lock();
    if (status.ok()) {
      latest_ = pods;
      latest_request_ = request;
      answered_ = true;
      wake_.notify_all();
      if (on_answer_) {
        lock.unlock();
        on_answer_(pods);
        lock.lock();
      }
    }
    thread_.WaitFor(lock, period);
  }
}

}  // namespace mgpu::dp
