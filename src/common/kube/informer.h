// Informer: a live local copy of one kind of object (optionally one namespace, filtered by selectors), kept
// by list-then-watch on one thread. Contract:
//  - Lists, then watches from the list's resourceVersion with bookmarks. When the watch ends cleanly it
//  resumes
//    from the last version seen; on 410 Gone, an error or a broken stream it relists, after a capped
//    exponential backoff with jitter when the failure repeats.
//  - Handlers run on the informer's thread, in order, never concurrently and never under the informer's lock
//  (they
//    may call Snapshot/Get). After a relist the handlers see exactly the difference from what they saw
//    before, so they receive every change once: no update is lost or delivered twice.
//  - Objects without a name or resourceVersion are logged with their kind and skipped.
//  - HasSynced() turns true after the first complete list has been delivered, and false while the objects
//    are more than options.max_objects.
//  - Stop() interrupts a blocked watch at once (a list within a second) and joins; the destructor calls it.
//    Start() at most once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/background.h"
#include "common/kube/client.h"

namespace mgpu::kube {

struct InformerOptions {
  ApiResource resource{};
  std::string ns{};  // empty: all namespaces (or a cluster-scoped resource)
  ListOptions selectors{};
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{30000};
  std::chrono::seconds watch_timeout{300};  // the server ends each watch after this; the informer resumes it
  std::chrono::milliseconds idle_timeout{360000};  // a watch silent this long (no bookmark either) is dead
  // Applied to every listed or watched object before it is kept and handed to the handlers, to keep only
  // the fields they read (memory); it must keep metadata name, namespace, uid and resourceVersion.
  std::function<void(Json& object)> transform{};
  // The most objects kept (0: no bound). Past it the informer is not synced (HasSynced() false, Overfull()
  // true, one sentence logged), keeps what it had and relists after the backoff until the objects fit again.
  size_t max_objects = 0;
};

struct InformerHandlers {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

class Informer {
 public:
  Informer(Client& client, InformerOptions options, InformerHandlers handlers);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  void Stop();

  bool HasSynced() const;
  bool Overfull() const;  // more objects than options.max_objects
  // Waits until synced or `timeout` passes (or Stop); returns HasSynced().
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  std::vector<Json> Snapshot() const;
  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  std::string resource_version() const;  // the last version seen (list, event or bookmark)
  int list_count() const;                // complete lists so far, the first included

 private:
  struct Delivery {
    enum class Type { kAdd, kUpdate, kDelete } type;
    Json old_object;
    Json new_object;
  };
  enum class WatchEnd { kClean, kGone, kFailed };

  void Run();
  bool ListAndReplace();
  WatchEnd WatchOnce(bool& saw_event);
  // Applies one watched object to the cache, appending what handlers must see.
  void ApplyLocked(const std::string& type, Json object, std::vector<Delivery>& out);
  void Deliver(std::vector<Delivery>& deliveries);
  // Marks the informer overfull at `count` objects (not synced) and says so.
  void OverfullLocked(size_t count);
  // Waits out the backoff for the `failures`-th failure in a row; false when stopping.
  bool Backoff(int failures);
  bool Valid(const Json& object) const;

  Client& client_;
  const InformerOptions options_;
  const InformerHandlers handlers_;
  CancelToken cancel_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  BackgroundThread thread_{mu_, cv_};
  bool synced_ = false;
  bool overfull_ = false;
  int list_count_ = 0;
  std::string resource_version_;
  // An object as kept: MessagePack, far smaller than a parsed Json tree (the extender's bytes per pod halved,
  // bench/RESULTS.md §5); unpacked when a handler, Get or Snapshot needs it.
  struct Kept {
    std::string uid;
    std::string version;
    std::vector<std::uint8_t> packed;
  };
  static Kept Pack(const Json& object);
  static Json Unpack(const Kept& kept);
  std::map<std::string, Kept> objects_;  // by "namespace/name"
};

}  // namespace mgpu::kube
