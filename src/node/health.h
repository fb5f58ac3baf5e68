// Carries the backend's health events into the device state, on one thread, until stopped.
#pragma once

#include "common/background.h"
#include "node/device_state.h"
#include "node/gpu_backend.h"

namespace mgpu::node {

class HealthWatcher {
 public:
  HealthWatcher(GpuBackend& backend, DeviceState& state) : backend_(backend), state_(state) {}
  ~HealthWatcher() { Stop(); }
  void Start();
  // Returns within one backend wait (half a second).
  void Stop();

 private:
  void Run();

  GpuBackend& backend_;
  DeviceState& state_;
  BackgroundThread thread_;
};

}  // namespace mgpu::node
