#include "node/device_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace mgpu::node {
namespace {

using namespace std::chrono_literals;

constexpr auto kLong = std::chrono::milliseconds(std::chrono::minutes(5));  // bounds a failure only

DeviceState TwoCards() {
  return DeviceState({{0, "GPU-a", "NVIDIA A10", 8192, true}, {1, "GPU-b", "NVIDIA A10", 8192, true}});
}

TEST(DeviceStateTest, HealthChangesBumpTheGenerationOnlyWhenSomethingChanged) {
  DeviceState state = TwoCards();
  EXPECT_EQ(state.Generation(), 0u);
  EXPECT_FALSE(state.SetHealthy("GPU-a", true));
  EXPECT_FALSE(state.SetHealthy("GPU-unknown", false));
  EXPECT_EQ(state.Generation(), 0u);

  EXPECT_TRUE(state.SetHealthy("GPU-a", false));
  EXPECT_EQ(state.Generation(), 1u);
  EXPECT_FALSE(state.Cards()[0].healthy);
  EXPECT_TRUE(state.Cards()[1].healthy);

  EXPECT_TRUE(state.SetHealthy("", false));  // every card: only GPU-b changes
  EXPECT_EQ(state.Generation(), 2u);
  EXPECT_FALSE(state.Cards()[1].healthy);
  EXPECT_FALSE(state.SetHealthy("", false));
  EXPECT_EQ(state.Generation(), 2u);
}

TEST(DeviceStateTest, WaitForChangeAnswersAtOnceWhenTheGenerationMovedOn) {
  DeviceState state = TwoCards();
  state.SetHealthy("GPU-b", false);
  auto [generation, cards] = state.WaitForChange(0, kLong, [] { return false; });
  EXPECT_EQ(generation, 1u);
  ASSERT_EQ(cards.size(), 2u);
  EXPECT_FALSE(cards[1].healthy);
}

TEST(DeviceStateTest, AHealthChangeWakesAWaiter) {
  DeviceState state = TwoCards();
  std::pair<uint64_t, std::vector<Card>> seen;
  std::thread waiter([&] { seen = state.WaitForChange(0, kLong, [] { return false; }); });
  state.SetHealthy("GPU-a", false);
  waiter.join();
  EXPECT_EQ(seen.first, 1u);
  EXPECT_FALSE(seen.second.at(0).healthy);
}

TEST(DeviceStateTest, WakeEndsAWaitWhoseStopHolds) {
  DeviceState state = TwoCards();
  std::atomic<bool> stop = false;
  uint64_t generation = 99;
  std::thread waiter([&] { generation = state.WaitForChange(0, kLong, [&] { return stop.load(); }).first; });
  stop = true;
  state.Wake();
  waiter.join();
  EXPECT_EQ(generation, 0u);
}

}  // namespace
}  // namespace mgpu::node
