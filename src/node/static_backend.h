// Cards from a YAML file instead of the driver. The file is a list of cards (or a mapping with `cards:`),
// with the field names of the D/gpu-inventory annotation:
//   - {index: 0, uuid: GPU-0a1b..., model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, healthy: true}
// Health changes come from SetHealthy, which tests and demos call.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>

#include "node/gpu_backend.h"

namespace mgpu::node {

class StaticBackend : public GpuBackend {
 public:
  explicit StaticBackend(std::vector<Card> cards);
  static Result<std::unique_ptr<StaticBackend>> Load(const std::string& path);
  // `source` names the text in error messages.
  static Result<std::vector<Card>> ParseCards(std::string_view yaml_text, std::string_view source);

  std::string Name() const override { return "static"; }
  Result<std::vector<GpuInfo>> Discover() override;
  Result<std::optional<HealthEvent>> WaitHealthEvent(std::chrono::milliseconds timeout) override;

  // Queues a health change of one card, as an XID event would.
  void SetHealthy(const std::string& uuid, bool healthy, std::string reason = "set by hand");

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Card> cards_;
  std::deque<HealthEvent> events_;
};

}  // namespace mgpu::node
