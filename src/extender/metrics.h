// The extender's Prometheus text (/metrics): requests and latency histograms per verb, filter failures by
// reason, binds that waited or failed, and the per-card allocation of the cache's view. Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "common/cluster_cache.h"

namespace mgpu::extender {

class Metrics {
 public:
  using SteadyNow = std::function<std::chrono::steady_clock::time_point()>;
  explicit Metrics(SteadyNow now = std::chrono::steady_clock::now) : now_(std::move(now)) {}

  void ObserveRequest(std::string_view verb, int code, double seconds);
  // What one filter found: the nodes it failed, by reason (a pod whose request is unreadable counts once, as
  // invalid_request), and whether its pod is blocked by fragmentation: a GPU pod that fit none of its
  // candidate nodes though the free capacity of the nodes it may use would hold it (kubectl mgpu defrag
  // --dry-run plans the moves that make room).
  struct FilterOutcome {
    bool invalid_request = false;
    uint64_t no_inventory = 0;
    uint64_t bad_inventory = 0;
    uint64_t insufficient = 0;
    bool blocked = false;
  };
  // Counts the failures and notes or forgets the pod as blocked; returns whether it is newly blocked. A
  // blocked pod is forgotten by a filter that finds it a node, by ForgetBlocked (its bind or deletion), or
  // once kBlockedFor has passed since it was last noted: kube-scheduler retries a pending pod at least every
  // 5 minutes, and a deleted one is never filtered again. At most kMaxBlocked pods, the latest noted.
  bool NoteFilter(const std::string& uid, const std::string& pod, const FilterOutcome& outcome);
  // A bind that had to wait for an ambiguous pair to resolve (DESIGN §5.5).
  void CountBindWait();
  // A bind answered with an error (kube-scheduler retries the pod).
  void CountBindFailure();
  // A wave (of deletions, ended workers, closed API connections) over, and its memory handed back.
  void CountMemoryTrim();
  uint64_t bind_waits() const;
  void ForgetBlocked(const std::string& uid);  // the pod is bound or gone
  std::string Render(const ClusterView& view) const;

 private:
  static constexpr std::array<double, 13> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,    0.25,  0.5,    1,     2.5,  5};
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};  // cumulative counts are summed when rendering
    uint64_t count = 0;
    double sum = 0;
  };
  static constexpr std::chrono::minutes kBlockedFor{10};
  static constexpr size_t kMaxBlocked = 256;
  struct Blocked {
    std::string pod;  // namespace/name
    std::chrono::steady_clock::time_point noted;
  };
  const SteadyNow now_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (verb, HTTP code)
  std::map<std::string, Histogram> latency_;
  std::map<std::string, uint64_t> filter_failures_;
  uint64_t bind_waits_ = 0;
  uint64_t bind_failures_ = 0;
  uint64_t memory_trims_ = 0;
  mutable std::map<std::string, Blocked> blocked_;  // by pod uid; expired ones are dropped when rendering
};

// The mgpu_extender_ready gauge (the same answer as /readyz).
std::string RenderReadiness(bool ready);

}  // namespace mgpu::extender
