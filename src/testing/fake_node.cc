#include "testing/fake_node.h"

#include <spdlog/spdlog.h>

#include "common/quantity.h"

namespace mgpu::testing {
namespace {

using kube::Json;

std::string KeyOf(const Json& pod) {
  return kube::MetadataString(pod, "namespace") + "/" + kube::MetadataString(pod, "name");
}

std::string PhaseOf(const Json& pod) { return pod.value("status", Json::object()).value("phase", "Pending"); }

}  // namespace

FakeNode::FakeNode(std::string name, std::string device_plugin_dir, std::string pod_resources_socket,
                   kube::Client& client, std::vector<std::string> managed, uint32_t seed)
    : name_(std::move(name)),
      client_(client),
      managed_(std::move(managed)),
      kubelet_(std::move(device_plugin_dir), std::move(pod_resources_socket)),
      rng_(seed) {}

FakeNode::~FakeNode() { Stop(); }

Status FakeNode::Start() {
  if (Status s = kubelet_.Start(); !s.ok()) return s;
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  kube::InformerOptions options{.resource = kube::kPods};
  options.selectors.field_selector = "spec.nodeName=" + name_;
  pods_ = std::make_unique<kube::Informer>(
      client_, options,
      kube::InformerHandlers{[this](const Json& pod) { Offer(pod); },
                             [this](const Json&, const Json& pod) { Offer(pod); },
                             [this](const Json& pod) { Forget(pod); }});
  pods_->Start();
  worker_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void FakeNode::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (pods_) pods_->Stop();
  if (worker_.joinable()) worker_.join();
  kubelet_.Stop();
}

std::map<std::string, AdmittedPod> FakeNode::Admitted() const {
  std::lock_guard lock(mu_);
  return admitted_;
}

size_t FakeNode::Waiting() const {
  std::lock_guard lock(mu_);
  return queue_.size() + busy_;
}

void FakeNode::Offer(const Json& pod) {
  if (PhaseOf(pod) != "Pending") return;
  std::lock_guard lock(mu_);
  if (!seen_.insert(kube::MetadataString(pod, "uid")).second) return;
  queue_.push_back(pod);
  wake_.notify_all();
}

void FakeNode::Forget(const Json& pod) {
  std::lock_guard hold(admission_mu_);
  kubelet_.Release(kube::MetadataString(pod, "namespace"), kube::MetadataString(pod, "name"));
  std::lock_guard lock(mu_);
  admitted_.erase(KeyOf(pod));
  std::erase_if(queue_, [&](const Json& queued) {
    return kube::MetadataString(queued, "uid") == kube::MetadataString(pod, "uid");
  });
}

void FakeNode::Run() {
  for (;;) {
    Json pod;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      pod = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    AdmittedPod result;
    {
      std::lock_guard hold(admission_mu_);
      result = Admit(pod);
    }
    const std::string ns = kube::MetadataString(pod, "namespace");
    const std::string name = kube::MetadataString(pod, "name");
    Json status = {{"phase", "Running"}};
    if (!result.error.empty()) {
      spdlog::warn("kubelet node={} pod={}/{} rejected: {}", name_, ns, name, result.error);
      status = {{"phase", "Failed"},
                {"reason", "UnexpectedAdmissionError"},
                {"message", "Pod was rejected: " + result.error}};
    }
    if (kube::ApiResult patched = client_.MergePatch(kube::kPods, ns, name, {{"status", status}});
        !patched.ok())
      spdlog::warn("kubelet node={} pod={}/{} cannot update its status: {}", name_, ns, name,
                   patched.message());
    std::lock_guard lock(mu_);
    admitted_[ns + "/" + name] = std::move(result);
    busy_ = false;
  }
}

AdmittedPod FakeNode::Admit(const Json& pod) {
  AdmittedPod out;
  out.node = name_;
  const std::string ns = kube::MetadataString(pod, "namespace");
  const std::string name = kube::MetadataString(pod, "name");
  const Json& spec = pod.value("spec", Json::object());
  for (const char* list : {"initContainers", "containers"}) {
    for (const Json& container : spec.value(list, Json::array())) {
      const std::string container_name = container.value("name", "");
      const Json& resources = container.value("resources", Json::object());
      std::map<std::string, int64_t> asked;
      for (const std::string& resource : managed_) {
        Json amount;  // requests default to limits
        for (const char* kind : {"requests", "limits"}) {
          const Json values = resources.value(kind, Json::object());
          if (values.contains(resource)) amount = values[resource];
        }
        if (amount.is_null()) continue;
        Result<int64_t> n = ParseQuantityJson(amount);
        if (!n.ok()) {
          out.error = "container " + container_name + ": " + resource + ": " + n.message();
          break;
        }
        if (*n > 0) asked[resource] = *n;
      }
      if (out.error.empty() && !asked.empty()) {
        Result<test::FakeKubelet::Admission> admission =
            kubelet_.Admit(ns, name, container_name, asked, rng_);
        if (admission.ok())
          out.containers.push_back({container_name, std::move(*admission)});
        else
          out.error = "container " + container_name + ": " + admission.message();
      }
      if (!out.error.empty()) {
        kubelet_.Release(ns, name);
        out.containers.clear();
        return out;
      }
    }
  }
  return out;
}

}  // namespace mgpu::testing
