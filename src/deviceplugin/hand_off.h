// The plugin's side of the hand-off (DESIGN §5 steps 2 and 3) between what it tells the kubelet and what the
// kubelet's PodResources shows, kept in one place:
//  - the preference GetPreferredAllocation matched to a pending container, until the kubelet's Allocate takes
//    those device IDs (the kubelet names no pod, so the IDs are how Allocate knows whom it serves);
//  - the cards an Allocate handed a container, until a PodResources answer can show who really holds them
//    (the kubelet may have admitted another member of the look-alike pool): an answer to a request started
//    a whole poll after the hand-out, because the kubelet records an allocation only once the plugin's reply
//    has reached it;
//  - the cards of the latest Allocate, which tell where the same container's next resource should go (the
//    kubelet admits a container's resources one after another) and whether the pair landed on one card.
// HandOffLedger is the pure core: no locks, no clocks (callers pass the time and the PodResources request
// numbers). HandOff owns one ledger under one mutex for the gRPC threads and the pod tracker, so one Allocate
// updates all three under one lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/lookalike.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/node_pods.h"

namespace mgpu::dp {

class HandOffLedger {
 public:
  using Clock = std::chrono::steady_clock;
  // Preferences remembered per resource until their Allocate (the kubelet admits one container at a time).
  static constexpr size_t kMaxMatches = 64;
  // How long an Allocate hints where the same container's next resource goes.
  static constexpr std::chrono::seconds kJustAllocatedWindow{10};

  // GetPreferredAllocation answered `ids` of `resource` for `container`.
  void Matched(Resource resource, std::vector<std::string> ids, const PendingContainer& container);

  // The cards of the latest Allocate when it was for another resource than `resource` and at most
  // kJustAllocatedWindow before `now`; marks them used by `resource`.
  std::vector<std::string> JustAllocated(Resource resource, Clock::time_point now);

  struct Allocation {
    std::optional<PendingContainer> matched;  // the container the IDs were preferred for, if any
    // The Allocate completed a pair begun by the previous one (the same container's other resource) on
    // other cards.
    bool split = false;
  };
  // The kubelet's Allocate of `ids` (on `cards`) went through at `now`: takes the preference matched to the
  // IDs and records its container's hand-out, which counts until an answer to a PodResources request numbered
  // above `requests_started` + 1 (`requests_started`: the requests started before the hand-out); remembers
  // `cards` as the hint for the next resource, or clears the hint this Allocate completes.
  Allocation Allocated(Resource resource, const std::vector<std::string>& ids, std::vector<std::string> cards,
                       uint64_t requests_started, Clock::time_point now);
  // The kubelet's Allocate of `ids` was refused: the preference matched to the IDs, taken.
  std::optional<PendingContainer> Refused(Resource resource, const std::vector<std::string>& ids);

  // The hand-outs a PodResources answer to request number `answered` may not show yet; those it shows the
  // truth for are forgotten.
  HandedOutCards Unsettled(uint64_t answered);
  // A pod was deleted: its hand-outs are forgotten.
  void Forget(const std::string& pod_uid);

 private:
  struct Match {
    std::vector<std::string> ids;  // sorted
    PendingContainer container;
  };
  struct HandOut {
    CardSet cards;
    uint64_t requests_before = 0;
  };
  struct Recent {
    Resource resource;
    std::vector<std::string> cards;
    Clock::time_point at;
    std::optional<Resource> used_by;
  };

  std::optional<PendingContainer> TakeMatch(Resource resource, const std::vector<std::string>& ids);

  std::map<Resource, std::deque<Match>> matches_;
  std::map<HandedOut, HandOut> handed_out_;
  std::optional<Recent> recent_;
};

// The ledger under one mutex, shared by the three resource servers and the pod tracker.
class HandOff {
 public:
  using Clock = HandOffLedger::Clock;
  // `requests_started` counts the PodResources List requests started so far
  // (PodResourcesPoller::RequestsStarted); empty: none ever.
  explicit HandOff(std::function<uint64_t()> requests_started = {});

  void Matched(Resource resource, std::vector<std::string> ids, const PendingContainer& container);
  std::vector<std::string> JustAllocated(Resource resource, Clock::time_point now);
  HandOffLedger::Allocation Allocated(Resource resource, const std::vector<std::string>& ids,
                                      std::vector<std::string> cards, Clock::time_point now);
  std::optional<PendingContainer> Refused(Resource resource, const std::vector<std::string>& ids);
  HandedOutCards Unsettled(uint64_t answered);
  void Forget(const std::string& pod_uid);

 private:
  const std::function<uint64_t()> requests_started_;
  std::mutex mu_;
  HandOffLedger ledger_;
};

}  // namespace mgpu::dp
