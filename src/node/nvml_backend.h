// Cards and XID health events from the NVIDIA driver through NVML, loaded with dlopen at run time: the build
// needs no NVIDIA headers, and a node without the driver gets a clear error instead of a crash.
#pragma once

#include <deque>
#include <map>

#include "node/gpu_backend.h"

namespace mgpu::node {

class NvmlBackend : public GpuBackend {
 public:
  // Loads `library` (normally libnvidia-ml.so.1) and initialises NVML.
  static Result<std::unique_ptr<NvmlBackend>> Open(const std::string& library = "libnvidia-ml.so.1");
  ~NvmlBackend() override;
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  std::string Name() const override { return "nvml"; }
  Result<std::vector<GpuInfo>> Discover() override;
  Result<std::optional<HealthEvent>> WaitHealthEvent(std::chrono::milliseconds timeout) override;

  struct Api;  // the NVML entry points used, resolved with dlsym

 private:
  NvmlBackend(void* handle, std::unique_ptr<Api> api);
  Status WatchEvents();

  void* handle_;
  std::unique_ptr<Api> api_;
  void* event_set_ = nullptr;
  std::map<void*, std::string> uuid_by_device_;  // NVML device handle → card uuid
  std::deque<HealthEvent> pending_;              // found while registering for events
};

}  // namespace mgpu::node
