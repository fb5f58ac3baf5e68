#include "deviceplugin/device_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

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

TEST(DeviceStateTest, TheLatestAllocateHintsTheSameContainersOtherResource) {
  DeviceState state = TwoCards();
  const DeviceState::Clock::time_point t0{};
  EXPECT_TRUE(state.TakeJustAllocated(Resource::kMemory, t0).empty());  // nothing allocated yet

  EXPECT_TRUE(state.RecordAllocation(Resource::kCore, {"GPU-b"}, t0));
  EXPECT_TRUE(
      state.TakeJustAllocated(Resource::kCore, t0 + 1s).empty());  // the same resource: another container
  EXPECT_EQ(state.TakeJustAllocated(Resource::kMemory, t0 + 1s), Strings{"GPU-b"});
}

TEST(DeviceStateTest, TheHintLastsTenSeconds) {
  DeviceState state = TwoCards();
  const DeviceState::Clock::time_point t0{};
  state.RecordAllocation(Resource::kCore, {"GPU-a"}, t0);
  EXPECT_EQ(state.TakeJustAllocated(Resource::kMemory, t0 + 10s), Strings{"GPU-a"});
  EXPECT_TRUE(state.TakeJustAllocated(Resource::kMemory, t0 + 10s + 1ms).empty());
}

TEST(DeviceStateTest, TheAllocateCompletingAPairClearsTheHintAndSaysWhetherTheCardsAgree) {
  DeviceState state = TwoCards();
  const DeviceState::Clock::time_point t0{};
  state.RecordAllocation(Resource::kCore, {"GPU-a"}, t0);
  ASSERT_FALSE(state.TakeJustAllocated(Resource::kMemory, t0).empty());
  EXPECT_TRUE(state.RecordAllocation(Resource::kMemory, {"GPU-a"}, t0));
  EXPECT_TRUE(state.TakeJustAllocated(Resource::kMemory, t0).empty());  // the pair is complete
  EXPECT_TRUE(state.TakeJustAllocated(Resource::kCore, t0).empty());

  state.RecordAllocation(Resource::kCore, {"GPU-a"}, t0);
  ASSERT_FALSE(state.TakeJustAllocated(Resource::kMemory, t0).empty());
  EXPECT_FALSE(state.RecordAllocation(Resource::kMemory, {"GPU-b"}, t0));  // split over two cards
  EXPECT_TRUE(state.TakeJustAllocated(Resource::kMemory, t0).empty());
}

TEST(DeviceStateTest, AnAllocateNobodyWasHintedStartsANewHint) {
  DeviceState state = TwoCards();
  const DeviceState::Clock::time_point t0{};
  state.RecordAllocation(Resource::kCore, {"GPU-a"}, t0);
  EXPECT_TRUE(state.RecordAllocation(Resource::kCore, {"GPU-b"}, t0 + 1s));  // the next container
  EXPECT_EQ(state.TakeJustAllocated(Resource::kMemory, t0 + 1s), Strings{"GPU-b"});
}

}  // namespace
}  // namespace mgpu::dp
