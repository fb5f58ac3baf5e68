#include "common/background.h"

namespace mgpu {

BackgroundThread::BackgroundThread() : mu_(own_mu_), wake_(own_wake_) {}

BackgroundThread::BackgroundThread(std::mutex& mu, std::condition_variable& wake) : mu_(mu), wake_(wake) {}

BackgroundThread::~BackgroundThread() { Stop(); }

void BackgroundThread::Start(std::function<void()> loop) {
  Stop();
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread(std::move(loop));
}

void BackgroundThread::Stop(const std::function<void()>& interrupt) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (interrupt) interrupt();
  if (thread_.joinable()) thread_.join();
}

bool BackgroundThread::WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout) {
  return WaitFor(lock, timeout, [] { return false; });
}

bool BackgroundThread::WaitFor(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout,
                               const std::function<bool()>& woken) {
  wake_.wait_for(lock, timeout, [&] { return stopping_.load() || woken(); });
  return !stopping_;
}

bool BackgroundThread::SleepFor(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return WaitFor(lock, timeout);
}

}  // namespace mgpu
