#include "common/background.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mgpu {
namespace {

constexpr auto kForever = std::chrono::hours(1);

// A loop waiting on its owner's condition variable for an hour ends as soon as Stop is called: Stop could not
// return otherwise.
TEST(BackgroundThreadTest, StopWakesALoopWaitingOnItsOwnersConditionVariable) {
  std::mutex mu;
  std::condition_variable wake;
  BackgroundThread thread(mu, wake);
  bool waiting = false, woke_stopping = false;
  std::condition_variable started;
  thread.Start([&] {
    std::unique_lock lock(mu);
    waiting = true;
    started.notify_all();
    woke_stopping = !thread.WaitFor(lock, kForever);
  });
  {
    std::unique_lock lock(mu);
    started.wait(lock, [&] { return waiting; });
  }
  thread.Stop();
  EXPECT_TRUE(woke_stopping);
  EXPECT_TRUE(thread.stopping());
}

// A loop its owner wakes with work (the owner sets its state under the mutex and notifies) ends its wait at
// once when it names that state, without Stop: the hour-long wait below could not end otherwise.
TEST(BackgroundThreadTest, TheOwnersWakeEndsAWaitThatNamesItsWork) {
  std::mutex mu;
  std::condition_variable wake;
  BackgroundThread thread(mu, wake);
  bool waiting = false, work = false, went_on = false, saw_work = false;
  std::condition_variable started, done;
  thread.Start([&] {
    std::unique_lock lock(mu);
    waiting = true;
    started.notify_all();
    went_on = thread.WaitFor(lock, kForever, [&] { return work; });
    saw_work = work;
    done.notify_all();
  });
  {
    std::unique_lock lock(mu);
    started.wait(lock, [&] { return waiting; });
    work = true;
  }
  wake.notify_all();
  {
    std::unique_lock lock(mu);
    done.wait(lock, [&] { return saw_work; });
  }
  EXPECT_TRUE(went_on);
  EXPECT_FALSE(thread.stopping());
  thread.Stop();
}

// The interrupt ends a call the loop is blocked in (here: a wait on another condition variable).
TEST(BackgroundThreadTest, StopRunsTheInterruptAfterRaisingTheFlag) {
  BackgroundThread thread;
  std::mutex other_mu;
  std::condition_variable other;
  bool interrupted = false;
  thread.Start([&] {
    std::unique_lock lock(other_mu);
    other.wait(lock, [&] { return interrupted; });
  });
  bool flag_seen_by_interrupt = false;
  thread.Stop([&] {
    flag_seen_by_interrupt = thread.stopping();
    std::lock_guard lock(other_mu);
    interrupted = true;
    other.notify_all();
  });
  EXPECT_TRUE(flag_seen_by_interrupt);
}

// Stop before Start and twice is harmless; a restarted loop runs with the flag lowered, and SleepFor on the
// thread's own mutex ends at Stop.
TEST(BackgroundThreadTest, RestartsAfterStopWithTheFlagLowered) {
  BackgroundThread thread;
  thread.Stop();
  thread.Stop();
  int runs = 0;
  bool slept_through = true;
  for (int i = 0; i < 2; ++i) {
    std::mutex mu;
    std::condition_variable started;
    bool ran = false, stopping_at_start = true;
    thread.Start([&] {
      {
        std::lock_guard lock(mu);
        stopping_at_start = thread.stopping();
        ran = true;
        ++runs;
      }
      started.notify_all();
      slept_through = thread.SleepFor(kForever);
    });
    {
      std::unique_lock lock(mu);
      started.wait(lock, [&] { return ran; });
    }
    thread.Stop();
    EXPECT_FALSE(stopping_at_start);
    EXPECT_FALSE(slept_through);
  }
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace mgpu
