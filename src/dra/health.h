// Card health the DRA way, toward the kubelet (docs/dra.md §6): the v1alpha1 DRAResourceHealth service. Each
// NodeWatchResources stream gets every device's health at once and again on every change of the cards' health
// (the devices of a card share its health), until the kubelet cancels it or the service stops. The
// scheduler's side of health is the device taint the slices carry (slices.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dra.h"
#include "dra/devices.h"
#include "kubelet/drahealth/v1alpha1/api.grpc.pb.h"
#include "node/device_state.h"

namespace mgpu::dra {

// The message for `cards` (their current health) of pool `pool`, each published as `variants`, stamped
// `now_unix_s`.
v1alpha1::NodeWatchResourcesResponse HealthMessage(const std::string& pool, const std::vector<Card>& cards,
                                                   const std::vector<Variant>& variants, int64_t now_unix_s);

class HealthService final : public v1alpha1::DRAResourceHealth::Service {
 public:
  HealthService(std::string pool, std::vector<Variant> variants, const node::DeviceState& state)
      : pool_(std::move(pool)), variants_(std::move(variants)), state_(state) {}
  grpc::Status NodeWatchResources(grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest*,
                                  grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) override;
  // Ends every stream within one check period; call before shutting the server down.
  void Stop();

 private:
  const std::string pool_;
  const std::vector<Variant> variants_;
  const node::DeviceState& state_;
  std::atomic<bool> stopping_{false};
};

}  // namespace mgpu::dra
