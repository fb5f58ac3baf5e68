// Events posted off the request path: Post() queues and returns at once; one thread creates them through
// the client in order. Events are advisory (kubectl describe), so a full queue drops the newest with a log
// line rather than slowing a bind or an admission, and Stop() drops what is still queued. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>

#include "common/background.h"
#include "common/kube/client.h"

namespace mgpu::kube {

class EventQueue {
 public:
  EventQueue(Client& client, std::string component, size_t capacity = 1024);
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // `involved` is the object the event is about (a Pod or Node, at least kind and metadata name).
  void Post(Json involved, std::string type, std::string reason, std::string message);
  // Returns once every event posted before the call was created or failed (tests, orderly shutdown).
  void Flush();
  void Stop();
  uint64_t dropped() const;

 private:
  struct Item {
    Json involved;
    std::string type, reason, message;
  };
  void Run();

  Client& client_;
  const std::string component_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  uint64_t posted_ = 0, done_ = 0, dropped_ = 0;
  BackgroundThread thread_{mu_, cv_};
};

// The reference to a pod an Event needs, for a pod known by key and uid only.
Json PodReference(std::string_view ns, std::string_view name, std::string_view uid);

}  // namespace mgpu::kube
