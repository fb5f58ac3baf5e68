#include "common/kube/event_queue.h"

#include <spdlog/spdlog.h>

namespace mgpu::kube {

EventQueue::EventQueue(Client& client, std::string component, size_t capacity)
    : client_(client), component_(std::move(component)), capacity_(capacity) {
  thread_.Start([this] { Run(); });
}

EventQueue::~EventQueue() { Stop(); }

void EventQueue::Post(Json involved, std::string type, std::string reason, std::string message) {
  {
    std::lock_guard lock(mu_);
    if (thread_.stopping() || queue_.size() >= capacity_) {
      ++dropped_;
      spdlog::warn("event dropped (queue full or stopping): {} {}", reason, message);
      return;
    }
    queue_.push_back(Item{std::move(involved), std::move(type), std::move(reason), std::move(message)});
    ++posted_;
  }
  cv_.notify_all();
}

void EventQueue::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = posted_;
  cv_.wait(lock, [&] { return thread_.stopping() || done_ >= target; });
}

void EventQueue::Stop() {
  thread_.Stop();
  std::lock_guard lock(mu_);
  dropped_ += queue_.size();
  queue_.clear();
}

uint64_t EventQueue::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
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
      spdlog::warn("{}/{} cannot record the {} event: {}", MetadataString(item.involved, "namespace"),
                   MetadataString(item.involved, "name"), item.reason, r.message());
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

Json PodReference(std::string_view ns, std::string_view name, std::string_view uid) {
  return {
      {"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}}}};
}

}  // namespace mgpu::kube
