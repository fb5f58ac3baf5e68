// ResourceSlice publishing (docs/dra.md §1, §2): keeps the API server's slices of the node's pool saying what
// slices.h builds from the cards and their current health. One thread; an informer watches the pool's slices
// (fieldSelector spec.nodeName, spec.driver), so a slice the kubelet deletes (it deletes its node's slices
// when it starts, and 30 s after the driver unregisters) or anyone changes is written again within a moment.
// Every publication that changes anything raises the pool generation above every one seen; stored slices
// that already say what the cards say (an earlier life's, or those of the other instance of a rolling update)
// are adopted without a write, so an upgrade neither deletes, re-creates nor re-versions them. Each slice
// written names its writer (the D/dra-publisher annotation: the instance's start time and id); while a newer
// instance of the rolling update is alive (its registration socket answers) and has written the pool, this
// one leaves the pool to it, so that two instances whose slices differ (an upgrade that changes the layout)
// do not rewrite the pool in turn until the old one stops. The node's D/gpu.* labels are patched at start and its cards written as
// D/gpu-dra-inventory instead of D/gpu-inventory (the extender scores DRA pods with them; device-plugin pods
// are not placed on a DRA node). A failed write is retried within seconds. On
// Stop the slices stay (a restarting daemon takes them over; the kubelet removes those of a driver that does
// not come back).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/background.h"
#include "common/config.h"
#include "common/kube/client.h"
#include "common/kube/informer.h"
#include "dra/devices.h"
#include "node/device_state.h"

namespace mgpu::dra {

class SlicePublisher {
 public:
  // `cards` as discovered; `state` holds their health. `client` and `state` must outlive Stop().
  // `instance`: the id of this instance of a rolling update (plugin.h), empty for the one instance.
  SlicePublisher(const Config& config, std::string node, std::vector<NodeCard> cards, kube::Client& client,
                 const node::DeviceState& state, std::string version, std::string instance = "");
  ~SlicePublisher();
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  void Start();
  // Returns within a second; idempotent.
  void Stop();

  uint64_t publications() const { return publications_; }  // passes that wrote the pool
  int64_t generation() const { return generation_; }       // the pool generation last written or adopted
  // The last pass found (or made) the stored slices equal to what the cards say.
  bool UpToDate() const { return up_to_date_; }

 private:
  void Run();
  // One pass over the pool; true when the stored slices now say what `cards` say.
  bool Reconcile(const std::vector<Card>& health);
  // The id of a newer instance that is alive and wrote one of `stored`, if any.
  std::optional<std::string> NewerPublisher(const std::map<std::string, kube::Json>& stored) const;
  void MarkDirty(const kube::Json& object);

  const Config config_;
  const std::string node_;
  const std::vector<NodeCard> cards_;
  kube::Client& client_;
  const node::DeviceState& state_;
  const std::string version_;
  const std::string publisher_;  // "<start time, ns since the epoch, 20 digits>/<instance id>"
  std::unique_ptr<kube::Informer> informer_;
  std::mutex mu_;
  std::map<std::string, std::string> written_;  // slice name -> resourceVersion of our last write
  std::atomic<bool> dirty_{false};
  std::atomic<uint64_t> publications_{0};
  std::atomic<int64_t> generation_{0};
  std::atomic<bool> up_to_date_{false};
  bool deferring_ = false;  // the last pass left the pool to a newer instance; Run's thread only
  BackgroundThread thread_;
};

// Publishes `node`'s pool once, for nodes that have no node daemon (API-only nodes of scale tests and
// benchmarks): its slices created, or replaced, at one generation above what is stored.
Status PublishOnce(kube::Client& client, const std::string& node, const std::vector<NodeCard>& cards,
                   const Config& config);

}  // namespace mgpu::dra
