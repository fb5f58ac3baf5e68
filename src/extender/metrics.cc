#include "extender/metrics.h"

#include <algorithm>

#include <set>
#include <sstream>

#include "common/metrics_text.h"

namespace mgpu::extender {
namespace {}  // namespace

void Metrics::ObserveRequest(std::string_view verb, int code, double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(verb), code}];
  Histogram& h = latency_[std::string(verb)];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      ++h.buckets[i];
      break;
    }
  }
  ++h.count;
  h.sum += seconds;
}

void Metrics::CountBindWait() {
  std::lock_guard lock(mu_);
  ++bind_waits_;
}

void Metrics::CountBindFailure() {
  std::lock_guard lock(mu_);
  ++bind_failures_;
}

void Metrics::CountMemoryTrim() {
  std::lock_guard lock(mu_);
  ++memory_trims_;
}

bool Metrics::NoteFilter(const std::string& uid, const std::string& pod, const FilterOutcome& outcome) {
  std::lock_guard lock(mu_);
  for (const auto& [reason, nodes] :
       {std::pair{"invalid_request", uint64_t{outcome.invalid_request}},
        std::pair{"no_inventory", outcome.no_inventory}, std::pair{"bad_inventory", outcome.bad_inventory},
        std::pair{"insufficient", outcome.insufficient}})
    if (nodes > 0) filter_failures_[reason] += nodes;
  if (!outcome.blocked) {
    blocked_.erase(uid);
    return false;
  }
  auto it = blocked_.find(uid);
  const bool news = it == blocked_.end();
  if (it == blocked_.end() && blocked_.size() >= kMaxBlocked) {
    blocked_.erase(std::min_element(blocked_.begin(), blocked_.end(), [](const auto& a, const auto& b) {
      return a.second.noted < b.second.noted;
    }));
  }
  blocked_[uid] = Blocked{pod, now_()};
  return news;
}

void Metrics::ForgetBlocked(const std::string& uid) {
  std::lock_guard lock(mu_);
  blocked_.erase(uid);
}

uint64_t Metrics::bind_waits() const {
  std::lock_guard lock(mu_);
  return bind_waits_;
}

std::string Metrics::Render(const ClusterView& view) const {
  std::ostringstream out;
  {
    std::lock_guard lock(mu_);
    out << "# HELP mgpu_extender_requests_total Extender requests served, by verb and HTTP status.\n"
           "# TYPE mgpu_extender_requests_total counter\n";
    for (const auto& [key, n] : requests_)
      out << "mgpu_extender_requests_total{verb=\"" << EscapeLabelValue(key.first) << "\",code=\""
          << key.second << "\"} " << n << '\n';
    out << "# HELP mgpu_extender_request_duration_seconds Time to answer an extender request, by verb.\n"
           "# TYPE mgpu_extender_request_duration_seconds histogram\n";
    for (const auto& [verb, h] : latency_) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        cumulative += h.buckets[i];
        out << "mgpu_extender_request_duration_seconds_bucket{verb=\"" << EscapeLabelValue(verb) << "\",le=\""
            << kBuckets[i] << "\"} " << cumulative << '\n';
      }
      out << "mgpu_extender_request_duration_seconds_bucket{verb=\"" << EscapeLabelValue(verb)
          << "\",le=\"+Inf\"} " << h.count << '\n';
      out << "mgpu_extender_request_duration_seconds_sum{verb=\"" << EscapeLabelValue(verb) << "\"} " << h.sum
          << '\n';
      out << "mgpu_extender_request_duration_seconds_count{verb=\"" << EscapeLabelValue(verb) << "\"} "
          << h.count << '\n';
    }
    out << "# HELP mgpu_extender_filter_failures_total Nodes failed by filter, by reason.\n"
           "# TYPE mgpu_extender_filter_failures_total counter\n";
    for (const auto& [reason, n] : filter_failures_)
      out << "mgpu_extender_filter_failures_total{reason=\"" << EscapeLabelValue(reason) << "\"} " << n
          << '\n';
    out << "# HELP mgpu_extender_bind_waits_total Binds that waited for an ambiguous pair to resolve.\n"
           "# TYPE mgpu_extender_bind_waits_total counter\n"
           "mgpu_extender_bind_waits_total "
        << bind_waits_
        << "\n# HELP mgpu_extender_bind_failures_total Binds answered with an error (kube-scheduler "
           "retries the pod).\n# TYPE mgpu_extender_bind_failures_total counter\n"
           "mgpu_extender_bind_failures_total "
        << bind_failures_
        << "\n# HELP mgpu_extender_memory_trims_total Waves (of deleted pods, ended workers, closed API "
           "connections) after which the extender forgot its decisions and handed freed memory back.\n"
           "# TYPE mgpu_extender_memory_trims_total counter\nmgpu_extender_memory_trims_total "
        << memory_trims_ << '\n';
    const auto now = now_();
    std::erase_if(blocked_, [&](const auto& entry) { return now - entry.second.noted > kBlockedFor; });
    std::set<std::string> pods;  // in name order
    for (const auto& [uid, b] : blocked_) pods.insert(b.pod);
    out << "# HELP mgpu_extender_pods_blocked_by_fragmentation GPU pods that fit no node at their latest "
           "filter though the free capacity of the nodes they may use would hold them.\n"
           "# TYPE mgpu_extender_pods_blocked_by_fragmentation gauge\n"
           "mgpu_extender_pods_blocked_by_fragmentation "
        << blocked_.size()
        << "\n# HELP mgpu_extender_pod_blocked_by_fragmentation A pod blocked by fragmentation (kubectl mgpu "
           "defrag --dry-run POD plans which offline pods to move to make room).\n"
           "# TYPE mgpu_extender_pod_blocked_by_fragmentation gauge\n";
    for (const std::string& pod : pods)
      out << "mgpu_extender_pod_blocked_by_fragmentation{pod=\"" << EscapeLabelValue(pod) << "\"} 1\n";
  }
  struct Series {
    const char* name;
    const char* help;
    double (*value)(const CardState&);
  };
  static const Series kSeries[] = {
      {"mgpu_extender_card_core_allocated_percent",
       "Online mgpu-core allocated on the card (scheduler view).",
       [](const CardState& c) -> double { return c.usage.core; }},
      {"mgpu_extender_card_reclaimed_core_allocated_percent",
       "Offline reclaimed-mgpu-core allocated on the card (scheduler view).",
       [](const CardState& c) -> double { return c.usage.reclaimed_core; }},
      {"mgpu_extender_card_memory_allocated_mib", "Memory allocated on the card in MiB (scheduler view).",
       [](const CardState& c) -> double { return static_cast<double>(c.usage.memory_mib); }},
      {"mgpu_extender_card_memory_capacity_mib", "Memory the card may hand out in MiB.",
       [](const CardState& c) -> double { return static_cast<double>(c.capacity_mib); }},
      {"mgpu_extender_card_healthy", "1 when the card takes new pods.",
       [](const CardState& c) -> double { return c.card.healthy ? 1 : 0; }},
  };
  double core = 0, cards = 0;
  const std::vector<const NodeView*> nodes = view.Nodes();
  for (const Series& s : kSeries) {
    out << "# HELP " << s.name << ' ' << s.help << "\n# TYPE " << s.name << " gauge\n";
    for (const NodeView* v : nodes) {
      for (const CardState& c : v->state.cards) {
        out << s.name << "{node=\"" << EscapeLabelValue(v->state.name) << "\",card=\"" << c.card.index
            << "\",uuid=\"" << EscapeLabelValue(c.card.uuid) << "\"} " << s.value(c) << '\n';
      }
    }
  }
  double memory = 0, capacity = 0, free_core = 0, stranded_core = 0;
  for (const NodeView* v : nodes) {
    for (const CardState& c : v->state.cards) {
      core += c.usage.core;
      cards += 1;
      memory += static_cast<double>(c.usage.memory_mib);
      capacity += static_cast<double>(c.capacity_mib);
      if (!c.card.healthy || c.usage.exclusive_holders > 0) continue;
      free_core += c.FreeCore();
      if (c.usage.holders > 0) stranded_core += c.FreeCore();
    }
  }
  const auto ratio = [](double part, double whole) { return whole > 0 ? part / whole : 0; };
  out << "# HELP mgpu_extender_cluster_core_allocated_ratio Online core allocated over all cards.\n"
         "# TYPE mgpu_extender_cluster_core_allocated_ratio gauge\n"
      << "mgpu_extender_cluster_core_allocated_ratio " << ratio(core, 100 * cards) << '\n'
      << "# HELP mgpu_extender_cluster_memory_allocated_ratio Card memory allocated over all cards.\n"
         "# TYPE mgpu_extender_cluster_memory_allocated_ratio gauge\n"
      << "mgpu_extender_cluster_memory_allocated_ratio " << ratio(memory, capacity) << '\n'
      << "# HELP mgpu_extender_cluster_fragmentation_ratio Free online core that sits on partly used cards "
         "(no whole-card pod can use it), over all free online core.\n"
         "# TYPE mgpu_extender_cluster_fragmentation_ratio gauge\n"
      << "mgpu_extender_cluster_fragmentation_ratio " << ratio(stranded_core, free_core) << '\n';
  out << "# HELP mgpu_extender_pod_gpu_share Cards' worth a pod holds: the sum over its cards of "
         "max(core/100, memory/card memory).\n"
         "# TYPE mgpu_extender_pod_gpu_share gauge\n";
  for (const NodeView* v : nodes) {
    for (const PlacedPod& p : v->pods) {
      out << "mgpu_extender_pod_gpu_share{" << PodLabels(v->state.name, p.key) << "} " << PodGpuShare(*v, p)
          << '\n';
    }
  }
  // A pod stuck in the hand-off (DESIGN §5) stays in this family: the alert reads how long.
  out << "# HELP mgpu_extender_pod_awaiting_allocation 1 for a pod placed on a node whose kubelet has "
         "not yet admitted it (no status from the kubelet, no gpu-allocated).\n"
         "# TYPE mgpu_extender_pod_awaiting_allocation gauge\n";
  for (const NodeView* v : nodes) {
    for (const PlacedPod& p : v->pods) {
      if (p.allocated) continue;
      out << "mgpu_extender_pod_awaiting_allocation{pod=\"" << EscapeLabelValue(p.key) << "\",node=\""
          << EscapeLabelValue(v->state.name) << "\"} 1\n";
    }
  }
  return out.str();
}

std::string RenderReadiness(bool ready) {
  return std::string(
             "# HELP mgpu_extender_ready 1 when this replica answers the verbs (informers synced and "
             "the leader).\n# TYPE mgpu_extender_ready gauge\nmgpu_extender_ready ") +
         (ready ? "1" : "0") + "\n";
}

}  // namespace mgpu::extender
