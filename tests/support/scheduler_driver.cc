#include "support/scheduler_driver.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace mgpu::testing {
namespace {

using nlohmann::json;

std::string KeyOf(const json& pod) {
  return kube::MetadataString(pod, "namespace") + "/" + kube::MetadataString(pod, "name");
}

// kube-scheduler calls an extender only for pods asking for one of its managed resources.
bool AsksFor(const json& pod, const std::vector<std::string>& managed) {
  const json& spec = pod.value("spec", json::object());
  for (const char* list : {"initContainers", "containers"}) {
    for (const json& container : spec.value(list, json::array())) {
      const json& resources = container.value("resources", json::object());
      for (const char* kind : {"limits", "requests"}) {
        const json amounts = resources.value(kind, json::object());
        for (const auto& [name, amount] : amounts.items()) {
          if (std::find(managed.begin(), managed.end(), name) != managed.end()) return true;
        }
      }
    }
  }
  return false;
}

// A reply's map {node: reason} under `key` (absent or null: none).
void AddReasons(const json& reply, const char* key, std::map<std::string, int>& counts) {
  auto it = reply.find(key);
  if (it == reply.end() || !it->is_object()) return;
  for (const auto& [node, reason] : it->items())
    counts[reason.is_string() ? reason.get<std::string>() : ""]++;
}

}  // namespace

SchedulerDriver::SchedulerDriver(kube::Client& client, std::string extender_url,
                                 std::vector<std::string> managed, std::string filter_verb)
    : client_(client),
      url_(std::move(extender_url)),
      managed_(std::move(managed)),
      filter_verb_(std::move(filter_verb)) {}

Result<json> SchedulerDriver::Post(const std::string& verb, const std::string& body) {
  httplib::Client http(url_);
  http.set_read_timeout(std::chrono::seconds(30));
  httplib::Result res = http.Post("/" + verb, body, "application/json");
  if (!res)
    return Error{"extender " + verb + ": no answer from " + url_ + " (" + httplib::to_string(res.error()) +
                 ")"};
  if (res->status != 200)
    return Error{"extender " + verb + ": HTTP " + std::to_string(res->status) + ": " + res->body};
  json reply = json::parse(res->body, nullptr, false);
  if (reply.is_discarded()) return Error{"extender " + verb + ": the reply is not JSON"};
  return reply;
}

void SchedulerDriver::ReportUnschedulable(const json& pod, const std::string& message) {
  (void)client_.RecordEvent(pod, "Warning", "FailedScheduling", message, "default-scheduler");
  const json status = {{"status",
                        {{"conditions",
                          {{{"type", "PodScheduled"},
                            {"status", "False"},
                            {"reason", "Unschedulable"},
                            {"message", message}}}}}}};
  (void)client_.MergePatch(kube::kPods, kube::MetadataString(pod, "namespace"),
                           kube::MetadataString(pod, "name"), status);
}

SchedulingOutcome SchedulerDriver::Schedule(const json& pod) {
  const std::string ns = kube::MetadataString(pod, "namespace");
  const std::string name = kube::MetadataString(pod, "name");
  kube::ApiResult listed = client_.ListNodes();
  if (!listed.ok()) return {"", "cannot list nodes: " + listed.message(), true};
  std::vector<std::string> nodes;
  for (const json& node : listed->value("items", json::array())) {
    if (!node.value("spec", json::object()).value("unschedulable", false))
      nodes.push_back(kube::MetadataString(node, "name"));
  }
  std::sort(nodes.begin(), nodes.end());
  if (nodes.empty()) return {"", "0/0 nodes are available."};

  if (!AsksFor(pod, managed_)) {
    kube::ApiResult bound = client_.BindPod(ns, name, kube::MetadataString(pod, "uid"), nodes.front());
    if (!bound.ok()) return {"", "binding rejected: " + bound.message(), true};
    return {nodes.front(), ""};
  }

  // Go's encoding/json writes the fields in declaration order; so does this.
  const std::string args =
      "{\"Pod\":" + pod.dump() + ",\"Nodes\":null,\"NodeNames\":" + json(nodes).dump() + "}";
  Result<json> filter = Post(filter_verb_, args);
  if (!filter.ok()) return {"", filter.message(), true};
  if (const json* error = filter->contains("Error") ? &(*filter)["Error"] : nullptr;
      error && error->is_string() && !error->get<std::string>().empty()) {
    ReportUnschedulable(pod, error->get<std::string>());
    return {"", error->get<std::string>(), true};
  }
  std::vector<std::string> passed;
  if (filter->contains("NodeNames") && (*filter)["NodeNames"].is_array()) {
    for (const json& n : (*filter)["NodeNames"])
      if (n.is_string()) passed.push_back(n.get<std::string>());
  }
  if (passed.empty()) {
    std::map<std::string, int> counts;
    AddReasons(*filter, "FailedNodes", counts);
    AddReasons(*filter, "FailedAndUnresolvableNodes", counts);
    std::vector<std::string> reasons;
    for (const auto& [reason, count] : counts) reasons.push_back(std::to_string(count) + " " + reason);
    std::sort(reasons.begin(), reasons.end());
    std::string message = "0/" + std::to_string(nodes.size()) + " nodes are available";
    for (size_t i = 0; i < reasons.size(); ++i) message += (i ? ", " : ": ") + reasons[i];
    message += ".";
    ReportUnschedulable(pod, message);
    return {"", message};
  }
  std::sort(passed.begin(), passed.end());
  std::string chosen = passed.front();
  if (passed.size() > 1) {
    const std::string prioritize_args =
        "{\"Pod\":" + pod.dump() + ",\"Nodes\":null,\"NodeNames\":" + json(passed).dump() + "}";
    Result<json> scores = Post("prioritize", prioritize_args);
    if (!scores.ok()) return {"", scores.message(), true};
    int64_t best = -1;
    for (const std::string& node : passed) {
      for (const json& s : scores->is_array() ? *scores : json::array()) {
        if (s.value("Host", "") == node && s.value("Score", int64_t{-1}) > best) {
          best = s.value("Score", int64_t{-1});
          chosen = node;
        }
      }
    }
  }
  const std::string bind = "{\"PodName\":" + json(name).dump() + ",\"PodNamespace\":" + json(ns).dump() +
                           ",\"PodUID\":" + json(kube::MetadataString(pod, "uid")).dump() +
                           ",\"Node\":" + json(chosen).dump() + "}";
  Result<json> bound = Post("bind", bind);
  if (!bound.ok()) return {"", bound.message(), true};
  if (const std::string error = bound->value("Error", ""); !error.empty()) return {"", error, true};
  (void)client_.RecordEvent(pod, "Normal", "Scheduled",
                            "Successfully assigned " + ns + "/" + name + " to " + chosen,
                            "default-scheduler");
  return {chosen, ""};
}

std::map<std::string, SchedulingOutcome> SchedulerDriver::SchedulePending() {
  constexpr int kMaxIdleRounds = 5;  // rounds in a row that bind nothing while errors are retried
  std::map<std::string, SchedulingOutcome> outcomes;
  int idle_rounds = 0;
  for (;;) {
    kube::ApiResult listed = client_.ListPods("");
    if (!listed.ok()) {
      spdlog::error("scheduler: cannot list pods: {}", listed.message());
      return outcomes;
    }
    std::vector<json> pending;
    for (const json& pod : listed->value("items", json::array())) {
      const json& spec = pod.value("spec", json::object());
      const std::string phase = pod.value("status", json::object()).value("phase", "Pending");
      if (spec.value("nodeName", "").empty() && phase == "Pending") pending.push_back(pod);
    }
    // kube-scheduler's queue is first come, first served: by the version the API server gave each pod (a pod
    // reported unschedulable was updated, so it goes to the back).
    std::sort(pending.begin(), pending.end(), [](const json& a, const json& b) {
      return std::stoll("0" + kube::MetadataString(a, "resourceVersion")) <
             std::stoll("0" + kube::MetadataString(b, "resourceVersion"));
    });
    bool progress = false, retry = false;
    for (const json& pod : pending) {
      SchedulingOutcome outcome = Schedule(pod);
      progress |= !outcome.node.empty();
      retry |= outcome.retry;
      outcomes[KeyOf(pod)] = std::move(outcome);
    }
    idle_rounds = progress ? 0 : idle_rounds + 1;
    if (!retry && !progress) return outcomes;
    if (idle_rounds >= kMaxIdleRounds) return outcomes;
  }
}

}  // namespace mgpu::testing
