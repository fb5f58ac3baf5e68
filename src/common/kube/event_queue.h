// Events posted off the request path: Post() queues and returns at once; one thread creates them through
// the client in order. Events are advisory (kubectl describe) and each is one API write, so they are
// sampled: at most `per_second` on average (bursts of `burst`), the others skipped. Nothing is lost
// silently: Post says what became of the event (the caller logs it with the pod), a full queue or a stopping
// queue drops the event with a log line naming its object, a failed create is logged the same way, and every
// outcome is counted (Counts, for /metrics). A bind or an admission never waits for an event. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>

#include "common/background.h"
#include "common/kube/client.h"

namespace mgpu::kube {

struct EventLimits {
  double per_second = 20;  // average rate of created events; 0: no limit
  double burst = 200;      // events that may be created at once after a quiet spell
  size_t capacity = 1024;  // events queued at most
};

// What became of a posted event.
enum class Posted {
  kQueued,   // will be created (or fail, logged and counted)
  kSkipped,  // over the rate: not created (counted)
  kDropped,  // the queue was full or stopping: not created (logged and counted)
};
// "queued", "skipped over the events rate", "dropped".
std::string_view Describe(Posted posted);

struct EventCounts {
  uint64_t created = 0, failed = 0, skipped = 0, dropped = 0;
};

// The counts as a Prometheus counter <prefix>_events_total{outcome="created"|"failed"|"skipped"|"dropped"}.
std::string RenderEventCounts(std::string_view prefix, const EventCounts& counts);

class EventQueue {
 public:
  EventQueue(Client& client, std::string component, EventLimits limits = {});
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // `involved` is the object the event is about (a Pod or Node, at least kind and metadata name).
  Posted Post(Json involved, std::string type, std::string reason, std::string message);
  // Returns once every event posted before the call was created or failed (tests, orderly shutdown).
  void Flush();
  // Stops the thread; what is still queued is dropped (logged and counted).
  void Stop();
  EventCounts Counts() const;

 private:
  struct Item {
    Json involved;
    std::string type, reason, message;
  };
  void Run();

  Client& client_;
  const std::string component_;
  const EventLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  double tokens_;
  std::chrono::steady_clock::time_point refilled_ = std::chrono::steady_clock::now();
  uint64_t posted_ = 0, done_ = 0;
  EventCounts counts_;
  BackgroundThread thread_{mu_, cv_};
};

// The reference to a pod an Event needs, for a pod known by key and uid only.
Json PodReference(std::string_view ns, std::string_view name, std::string_view uid);

}  // namespace mgpu::kube
