// The hardware side of the node daemon, in either mode: finding the node's cards and hearing when one goes
// bad. NvmlBackend talks to the driver; StaticBackend reads cards from YAML (tests, demos, clusters without
// NVML); make_backend.h picks one by config. Nothing above this interface knows which one runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu::node {

struct GpuInfo {
  Card card;
  int minor = -1;          // /dev/nvidia<minor>; -1 when unknown
  std::string pci_bus_id;  // empty when unknown
};

struct HealthEvent {
  std::string card_uuid;  // empty: the event names no card, so it concerns every card
  bool healthy = false;
  std::string reason;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual std::string Name() const = 0;
  virtual Result<std::vector<GpuInfo>> Discover() = 0;
  // Blocks up to `timeout` for the next health change; nullopt when none came. Called from one thread.
  virtual Result<std::optional<HealthEvent>> WaitHealthEvent(std::chrono::milliseconds timeout) = 0;
};

// NVML XIDs that mark a card unhealthy: all but the application-caused 13, 31, 43, 45, 68, 109 (DESIGN §7).
bool IsCriticalXid(uint64_t xid);

}  // namespace mgpu::node
