// The one way the daemons run a long-lived loop beside their request threads (a watch, a poll, a lease
// renewal, a server's accept loop) and stop it, so every daemon stops the same way on SIGTERM. Start runs the
// loop on its own thread. Stop raises the stop flag under the owner's mutex, so a loop that reads stopping()
// under that mutex before it waits cannot miss the wake-up; then it wakes the owner's condition variable,
// runs the owner's interrupt for a call the loop may be blocked in (a request's cancel, an eventfd write, a
// server's halt) and joins. Stop may be called again; the destructor calls it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace mgpu {

class BackgroundThread {
 public:
  // The loop waits on the thread's own mutex and condition variable (SleepFor).
  BackgroundThread();
  // The loop waits on its owner's `mu` and `wake` (WaitFor, or the owner's own waits that read stopping()).
  BackgroundThread(std::mutex& mu, std::condition_variable& wake);
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

  // Runs `loop` on a new thread with the flag lowered; a loop still running is stopped first.
  void Start(std::function<void()> loop);
  // Raises the flag, wakes the loop, runs `interrupt` (when given) and joins.
  void Stop(const std::function<void()>& interrupt = {});
  bool stopping() const { return stopping_.load(); }
  // Waits `timeout` on the owner's condition variable (`lock` holds the owner's mutex) or until Stop; false
  // when stopping.
  bool WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout);
  // The same, ending early once `woken` holds (read under `lock` at each wake-up): for a loop its owner wakes
  // with work. The wait above ends early only at Stop: a notify alone does not end it.
  bool WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout,
               const std::function<bool()>& woken);
  // WaitFor on the mutex the thread waits on, taken here.
  bool SleepFor(std::chrono::milliseconds timeout);

 private:
  std::mutex own_mu_;
  std::condition_variable own_wake_;
  std::mutex& mu_;
  std::condition_variable& wake_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace mgpu
