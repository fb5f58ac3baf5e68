#include "dra/health.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/dra.h"

namespace mgpu::dra {
namespace {

// How often a stream notices a cancelled kubelet or a stopping service while no health changes.
constexpr auto kStreamCheck = std::chrono::milliseconds(500);

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

v1alpha1::NodeWatchResourcesResponse HealthMessage(const std::string& pool, const std::vector<Card>& cards,
                                                   const std::vector<Variant>& variants, int64_t now_unix_s) {
  v1alpha1::NodeWatchResourcesResponse out;
  for (const Card& c : cards) {
    for (Variant v : variants) {
      auto* d = out.add_devices();
      d->mutable_device()->set_pool_name(pool);
      d->mutable_device()->set_device_name(DeviceName(c.index, v));
      d->set_health(c.healthy ? v1alpha1::HEALTHY : v1alpha1::UNHEALTHY);
      d->set_last_updated_time(now_unix_s);
      d->set_message(c.healthy ? "" : "card " + c.uuid + " reported a critical XID");
    }
  }
  return out;
}

grpc::Status HealthService::NodeWatchResources(
    grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest*,
    grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) {
  uint64_t sent = state_.Generation() - 1;  // anything but the current one: send at once
  while (true) {
    auto [generation, cards] =
        state_.WaitForChange(sent, kStreamCheck, [&] { return stopping_.load() || context->IsCancelled(); });
    if (stopping_ || context->IsCancelled()) return grpc::Status::OK;
    if (generation == sent) continue;
    if (!writer->Write(HealthMessage(pool_, cards, variants_, NowUnix()))) return grpc::Status::OK;
    spdlog::info("pool={} device health sent to the kubelet (generation {})", pool_, generation);
    sent = generation;
  }
}

void HealthService::Stop() {
  stopping_ = true;
  state_.Wake();
}

}  // namespace mgpu::dra
