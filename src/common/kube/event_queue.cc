#include "common/kube/event_queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace mgpu::kube {
namespace {

std::string ObjectOf(const Json& involved) {
  const std::string ns = MetadataString(involved, "namespace");
  return (ns.empty() ? "" : ns + "/") + MetadataString(involved, "name");
}

}  // namespace

std::string_view Describe(Posted posted) {
  switch (posted) {
    case Posted::kQueued:
      return "queued";
    case Posted::kSkipped:
      return "skipped over the events rate";
    case Posted::kDropped:
      return "dropped";
  }
  return "";
}

std::string RenderEventCounts(std::string_view prefix, const EventCounts& counts) {
  const std::string name = std::string(prefix) + "_events_total";
  std::string out = "# HELP " + name +
                    " Events posted, by outcome: created, failed (the API server refused; logged), skipped "
                    "(over the events rate), dropped (queue full or stopping; logged).\n# TYPE " +
                    name + " counter\n";
  for (const auto& [outcome, n] :
       {std::pair{"created", counts.created}, std::pair{"failed", counts.failed},
        std::pair{"skipped", counts.skipped}, std::pair{"dropped", counts.dropped}})
    out += name + "{outcome=\"" + outcome + "\"} " + std::to_string(n) + "\n";
  return out;
}

EventQueue::EventQueue(Client& client, std::string component, EventLimits limits)
    : client_(client), component_(std::move(component)), limits_(limits), tokens_(limits.burst) {
  thread_.Start([this] { Run(); });
}

EventQueue::~EventQueue() { Stop(); }

Posted EventQueue::Post(Json involved, std::string type, std::string reason, std::string message) {
  {
    std::lock_guard lock(mu_);
    if (thread_.stopping() || queue_.size() >= limits_.capacity) {
      ++counts_.dropped;
      spdlog::warn("{} event {} dropped ({}): {}", ObjectOf(involved), reason,
                   thread_.stopping() ? "stopping" : "queue full", message);
      return Posted::kDropped;
    }
    if (limits_.per_second > 0) {
      const auto now = std::chrono::steady_clock::now();
      tokens_ = std::min(limits_.burst, tokens_ + std::chrono::duration<double>(now - refilled_).count() *
                                                      limits_.per_second);
      refilled_ = now;
      if (tokens_ < 1) {
        ++counts_.skipped;
        return Posted::kSkipped;
      }
      tokens_ -= 1;
    }
    queue_.push_back(Item{std::move(involved), std::move(type), std::move(reason), std::move(message)});
    ++posted_;
  }
  cv_.notify_all();
  return Posted::kQueued;
}

void EventQueue::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = posted_;
  cv_.wait(lock, [&] { return thread_.stopping() || done_ >= target; });
}

void EventQueue::Stop() {
  thread_.Stop();
  std::lock_guard lock(mu_);
  if (queue_.empty()) return;
  spdlog::warn("{} queued events dropped at shutdown (the first about {})", queue_.size(),
               ObjectOf(queue_.front().involved));
  counts_.dropped += queue_.size();
  queue_.clear();
}

EventCounts EventQueue::Counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

void EventQueue::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return thread_.stopping() || !queue_.empty(); });
    if (thread_.stopping()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    ApiResult r = client_.RecordEvent(item.involved, item.type, item.reason, item.message, component_);
    if (!r.ok())
      spdlog::warn("{} cannot record the {} event: {}", ObjectOf(item.involved), item.reason, r.message());
    lock.lock();
    ++(r.ok() ? counts_.created : counts_.failed);
    ++done_;
    cv_.notify_all();
  }
}

Json PodReference(std::string_view ns, std::string_view name, std::string_view uid) {
  return {
      {"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}}}};
}

}  // namespace mgpu::kube
