#include "deviceplugin/metrics.h"

#include <httplib.h>

#include <algorithm>
#include <sstream>

#include "common/metrics_text.h"

namespace mgpu::dp {
namespace {

void RenderGuard(const MetricsSnapshot& s, std::ostringstream& out) {
  if (s.guard.empty()) return;
  const auto family = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  const auto card_labels = [&](const std::string& uuid) {
    auto card = std::find_if(s.cards.begin(), s.cards.end(), [&](const Card& c) { return c.uuid == uuid; });
    return "node=\"" + EscapeLabelValue(s.node) + "\",card=\"" +
           (card == s.cards.end() ? std::string() : std::to_string(card->index)) + "\",uuid=\"" +
           EscapeLabelValue(uuid) + "\"";
  };
  family("mgpu_guard_state_readable", "gauge",
         "1 when the card's guard state file is valid, 0 when it is missing or corrupt (guards step aside).");
  for (const GuardCardState& g : s.guard)
    out << "mgpu_guard_state_readable{" << card_labels(g.uuid) << "} " << (g.readable ? 1 : 0) << '\n';
  family("mgpu_guard_card_utilization_percent", "gauge",
         "The card's SM utilisation the guards last measured (NVML).");
  for (const GuardCardState& g : s.guard) {
    if (g.readable)
      out << "mgpu_guard_card_utilization_percent{" << card_labels(g.uuid) << "} " << g.state.util_percent
          << '\n';
  }
  const auto policy_name = [](guard::SharePolicy p) {
    return p == guard::SharePolicy::kFixedShare             ? "fixed-share"
           : p == guard::SharePolicy::kGuaranteedBurstShare ? "guaranteed-burst-share"
                                                            : "native-burst-share";
  };
  // `with_policy`: the container's compute policy is a label too.
  const auto per_container = [&](const char* name, const char* type, const char* help, auto field,
                                 bool with_policy = false) {
    family(name, type, help);
    for (const GuardCardState& g : s.guard) {
      for (const guard::ContainerSnapshot& c : g.state.containers) {
        out << name << '{' << card_labels(g.uuid) << ",container=\"" << EscapeLabelValue(c.token)
            << "\",qos=\"" << (c.qos == guard::QosLevel::kOffline ? "offline" : "online") << '"';
        if (with_policy) out << ",policy=\"" << policy_name(c.policy) << '"';
        out << "} " << field(c) << '\n';
      }
    }
  };
  using C = guard::ContainerSnapshot;
  per_container("mgpu_guard_container_memory_used_bytes", "gauge",
                "Device memory the container's live processes hold on the card.",
                [](const C& c) { return c.used_bytes; });
  per_container("mgpu_guard_container_memory_cap_bytes", "gauge", "The container's memory cap on the card.",
                [](const C& c) { return c.cap_bytes; });
  per_container("mgpu_guard_container_processes", "gauge", "The container's live processes using the card.",
                [](const C& c) { return c.processes; });
  per_container("mgpu_guard_container_utilization_percent", "gauge",
                "The container's SM utilisation the guards last measured.",
                [](const C& c) { return c.util_percent; });
  per_container("mgpu_guard_container_launches_total", "counter", "Kernel launches the guard let through.",
                [](const C& c) { return c.launches; });
  per_container("mgpu_guard_container_launches_throttled_total", "counter",
                "Kernel launches that waited for the container's compute share.",
                [](const C& c) { return c.throttled; });
  per_container("mgpu_guard_container_offline_held_back_total", "counter",
                "Offline kernel launches held back while online work ran on the card.",
                [](const C& c) { return c.held_back; });
  per_container("mgpu_guard_container_offline_held_back_seconds_total", "counter",
                "Time offline kernel launches spent held back.",
                [](const C& c) { return static_cast<double>(c.held_ns) / 1e9; });
  // What the guard enforces on each container.
  per_container(
      "mgpu_guard_container_compute_share_percent", "gauge",
      "The container's compute share (MGPU_CORE_PERCENT, or MGPU_RECLAIMED_CORE_PERCENT offline); 0: none.",
      [](const C& c) { return c.share_percent; }, true);
  per_container("mgpu_guard_container_compute_share_enforced", "gauge",
                "1 when the guard holds the container's launches to its share (a policy that promises one, "
                "or offline, with a percent set, and its use measurable through NVML), else 0.",
                [](const C& c) {
                  const bool held =
                      c.share_percent > 0 && (c.qos == guard::QosLevel::kOffline ||
                                              c.policy != guard::SharePolicy::kNativeBurstShare);
                  return held && c.share_measured ? 1 : 0;
                });
  per_container("mgpu_guard_container_compute_budget_seconds", "gauge",
                "The container's compute budget, in seconds of the whole card (negative: a debt its launches "
                "wait out).",
                [](const C& c) { return static_cast<double>(c.credit) / 1e8; });
  per_container("mgpu_guard_container_offline_release_seconds", "gauge",
                "How long online work must be idle before the container's offline launches go (0: online, or "
                "not known).",
                [](const C& c) { return static_cast<double>(c.release_ns) / 1e9; });
}

}  // namespace

std::vector<GuardCardState> ReadGuardStates(const std::string& state_directory,
                                            const std::vector<Card>& cards) {
  std::vector<GuardCardState> out;
  for (const Card& c : cards) {
    GuardCardState g{c.uuid, false, {}};
    std::string error;
    g.readable = guard::ReadCardState(state_directory, c.uuid, g.state, error);
    out.push_back(std::move(g));
  }
  return out;
}

std::string RenderMetrics(const MetricsSnapshot& s) {
  std::ostringstream out;
  const auto usage = UsageByCard(s.allocated);
  const auto card_labels = [&](const Card& c) {
    return "node=\"" + EscapeLabelValue(s.node) + "\",card=\"" + std::to_string(c.index) + "\",uuid=\"" +
           EscapeLabelValue(c.uuid) + "\",model=\"" + EscapeLabelValue(c.model) + "\"";
  };
  const auto family = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  family("mgpu_plugin_registered", "gauge",
         "1 when every resource of the plugin is registered with the kubelet.");
  out << "mgpu_plugin_registered{node=\"" << EscapeLabelValue(s.node) << "\"} " << (s.registered ? 1 : 0)
      << '\n';
  family("mgpu_card_healthy", "gauge", "1 when the card takes new work, 0 after a critical XID error.");
  for (const Card& c : s.cards)
    out << "mgpu_card_healthy{" << card_labels(c) << "} " << (c.healthy ? 1 : 0) << '\n';
  family("mgpu_card_memory_mib", "gauge", "The card's memory in MiB.");
  for (const Card& c : s.cards)
    out << "mgpu_card_memory_mib{" << card_labels(c) << "} " << c.memory_mib << '\n';
  const auto allocated = [&](const char* name, const char* help, auto field) {
    family(name, "gauge", help);
    for (const Card& c : s.cards) {
      auto it = usage.find(c.uuid);
      out << name << '{' << card_labels(c) << "} " << (it == usage.end() ? 0 : field(it->second)) << '\n';
    }
  };
  allocated("mgpu_card_core_allocated_percent", "Online mgpu-core the kubelet allocated on the card.",
            [](const CardShare& u) { return int64_t{u.core}; });
  allocated("mgpu_card_reclaimed_core_allocated_percent",
            "Offline reclaimed-mgpu-core the kubelet allocated on the card.",
            [](const CardShare& u) { return int64_t{u.reclaimed_core}; });
  allocated("mgpu_card_memory_allocated_mib", "mgpu-memory the kubelet allocated on the card, in MiB.",
            [](const CardShare& u) { return u.memory_mib; });

  family("mgpu_pod_gpu_share", "gauge",
         "GPUs a pod holds: the sum over its cards of max(core/100, memory/card memory).");
  for (const auto& [pod, assignment] : s.allocated) {
    double share = 0;
    for (const auto& c : assignment.containers) {
      for (const auto& piece : c.cards) {
        auto card =
            std::find_if(s.cards.begin(), s.cards.end(), [&](const Card& k) { return k.uuid == piece.uuid; });
        share += GpuShare(piece, card != s.cards.end() ? card->memory_mib : 0);
      }
    }
    const auto slash = pod.find('/');
    out << "mgpu_pod_gpu_share{node=\"" << EscapeLabelValue(s.node) << "\",namespace=\""
        << EscapeLabelValue(pod.substr(0, slash)) << "\",pod=\"" << EscapeLabelValue(pod.substr(slash + 1))
        << "\"} " << share << '\n';
  }

  RenderGuard(s, out);

  const auto calls = [&](const char* name, const char* help, auto field) {
    family(name, "counter", help);
    for (const auto& [resource, c] : s.calls)
      out << name << "{node=\"" << EscapeLabelValue(s.node) << "\",resource=\"" << EscapeLabelValue(resource)
          << "\"} " << field(c) << '\n';
  };
  calls("mgpu_plugin_preferred_allocation_total", "GetPreferredAllocation container requests served.",
        [](const CallCounts& c) { return c.preferred; });
  calls("mgpu_plugin_preferred_allocation_matched_total",
        "GetPreferredAllocation container requests answered from a pending pod's assignment.",
        [](const CallCounts& c) { return c.preferred_matched; });
  calls("mgpu_plugin_preferred_allocation_errors_total", "GetPreferredAllocation container requests refused.",
        [](const CallCounts& c) { return c.preferred_errors; });
  calls("mgpu_plugin_allocate_total", "Allocate container requests served.",
        [](const CallCounts& c) { return c.allocate; });
  calls("mgpu_plugin_allocate_errors_total", "Allocate container requests refused.",
        [](const CallCounts& c) { return c.allocate_errors; });
  calls("mgpu_plugin_split_allocations_total",
        "Containers admitted without the extender whose resources landed on different cards.",
        [](const CallCounts& c) { return c.split; });
  return out.str();
}

MetricsServer::MetricsServer(std::function<MetricsSnapshot()> snapshot, std::function<bool()> healthy)
    : snapshot_(std::move(snapshot)), healthy_(std::move(healthy)) {}

MetricsServer::~MetricsServer() { Stop(); }

Status MetricsServer::Start(const std::string& address) {
  HttpLimits limits;
  limits.workers = kMetricsWorkers;
  limits.connections_per_client = kMetricsConnectionsPerClient;
  limits.max_body_bytes = 4096;  // nothing here takes a body
  server_ = std::make_unique<BoundedHttpServer>("mgpu-device-plugin", limits);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(snapshot_()) + RenderHttpRefusals("mgpu_plugin", server_->Refusals()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = healthy_();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok\n" : "not serving\n", "text/plain");
  });
  if (Status started = server_->Start(address, "devicePlugin.metricsAddress"); !started.ok()) {
    server_.reset();
    return started;
  }
  port_ = server_->port();
  return Status::Ok();
}

void MetricsServer::Stop() {
  if (server_) server_->Stop();
  server_.reset();
}

}  // namespace mgpu::dp
