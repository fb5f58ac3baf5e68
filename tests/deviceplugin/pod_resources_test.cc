// The PodResources poller against the fake kubelet's PodResources server over a real unix socket: numbered
// answers, the latest kept, and a kubelet that is down or slow.
#include "deviceplugin/pod_resources.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "deviceplugin/devices.h"
#include "testing/fake_kubelet.h"
#include "testing/test_env.h"

namespace mgpu::dp {
namespace {

using namespace std::chrono_literals;
using testing::WaitUntil;

constexpr auto kWait = 30s;
constexpr auto kLong = std::chrono::milliseconds(5min);  // bounds a failure only
const ResourceNames kNames = Config().Names();

class PodResourcesPollerTest : public ::testing::Test {
 protected:
  PodResourcesPollerTest() {
    std::filesystem::create_directory(dir_.path() + "/dp");
    config_.memory_unit_mib = 1024;
    config_.device_plugin.pod_resources_socket = dir_.path() + "/pod-resources.sock";
    config_.device_plugin.pod_resources_poll_ms = 20;
    kubelet_ =
        std::make_unique<test::FakeKubelet>(dir_.path() + "/dp", config_.device_plugin.pod_resources_socket);
  }

  // `count` mgpu-core devices of `card` held by default/<pod>'s container "main".
  void HoldCore(const std::string& pod, const std::string& card, int count) {
    std::vector<std::string> ids;
    for (int i = 0; i < count; ++i) ids.push_back(DeviceId(card, Resource::kCore, i));
    kubelet_->Hold("default", pod, "main", kNames.core, ids);
  }

  static AllocatedPods CoreOf(const std::string& pod, const std::string& card, int count) {
    return {{"default/" + pod, Assignment{{ContainerAssignment{"main", {CardShare{card, count, 0, 0}}}}}}};
  }

  // The number of the request behind the latest answer.
  uint64_t Answered() const {
    uint64_t request = 0;
    poller_->Latest(&request);
    return request;
  }

  // Waits for an answer to a request started after this call: it shows everything held before.
  bool WaitForFreshAnswer() {
    const uint64_t started = poller_->RequestsStarted();
    return WaitUntil([&] { return Answered() > started; }, kWait);
  }

  testing::TempDir dir_;
  Config config_;
  std::unique_ptr<test::FakeKubelet> kubelet_;
  std::unique_ptr<PodResourcesPoller> poller_ = std::make_unique<PodResourcesPoller>(config_);
};

TEST_F(PodResourcesPollerTest, NothingBeforeTheFirstAnswer) {
  uint64_t request = 99;
  EXPECT_TRUE(poller_->Latest(&request).empty());
  EXPECT_EQ(request, 0u);
  EXPECT_EQ(poller_->RequestsStarted(), 0u);
  EXPECT_FALSE(poller_->HasAnswer());
}

TEST_F(PodResourcesPollerTest, KeepsTheLatestAnswerWithTheNumberOfItsRequest) {
  ASSERT_TRUE(kubelet_->Start().ok());
  poller_->Start();
  ASSERT_TRUE(poller_->WaitForAnswer(kWait));
  EXPECT_GE(Answered(), 1u);
  EXPECT_LE(Answered(), poller_->RequestsStarted());
  EXPECT_TRUE(poller_->Latest().empty());

  HoldCore("p", "GPU-a", 10);
  ASSERT_TRUE(WaitForFreshAnswer());
  EXPECT_EQ(poller_->Latest(), CoreOf("p", "GPU-a", 10));

  kubelet_->Release("default", "p");
  ASSERT_TRUE(WaitForFreshAnswer());
  EXPECT_TRUE(poller_->Latest().empty());
}

TEST_F(PodResourcesPollerTest, EveryAnswerReachesTheCallback) {
  std::mutex mu;
  std::vector<AllocatedPods> answers;
  poller_ = std::make_unique<PodResourcesPoller>(config_, [&](const AllocatedPods& pods) {
    std::lock_guard lock(mu);
    answers.push_back(pods);
  });
  HoldCore("p", "GPU-b", 5);
  ASSERT_TRUE(kubelet_->Start().ok());
  poller_->Start();
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::lock_guard lock(mu);
        return answers.size() >= 3;
      },
      kWait));
  poller_->Stop();
  std::lock_guard lock(mu);
  for (const AllocatedPods& pods : answers) EXPECT_EQ(pods, CoreOf("p", "GPU-b", 5));
  EXPECT_EQ(answers.size(), Answered());  // one answer per request: none failed here
}

TEST_F(PodResourcesPollerTest, AKubeletThatIsDownGivesNoAnswerUntilItComes) {
  poller_->Start();
  ASSERT_TRUE(WaitUntil([&] { return poller_->RequestsStarted() >= 3; }, kWait));
  EXPECT_FALSE(poller_->HasAnswer());
  EXPECT_FALSE(poller_->WaitForAnswer(1ms));
  EXPECT_EQ(Answered(), 0u);

  HoldCore("p", "GPU-a", 20);
  const uint64_t failed = poller_->RequestsStarted();
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_TRUE(poller_->WaitForAnswer(kWait));
  EXPECT_GT(Answered(), failed);
  EXPECT_EQ(poller_->Latest(), CoreOf("p", "GPU-a", 20));
}

TEST_F(PodResourcesPollerTest, AKubeletThatGoesAwayLeavesTheLastAnswer) {
  HoldCore("p", "GPU-a", 20);
  ASSERT_TRUE(kubelet_->Start().ok());
  poller_->Start();
  ASSERT_TRUE(poller_->WaitForAnswer(kWait));
  kubelet_->Stop();
  const uint64_t answered = Answered();
  const uint64_t started = poller_->RequestsStarted();
  ASSERT_TRUE(WaitUntil([&] { return poller_->RequestsStarted() >= started + 3; }, kWait));
  EXPECT_TRUE(poller_->HasAnswer());
  EXPECT_EQ(poller_->Latest(), CoreOf("p", "GPU-a", 20));
  EXPECT_LE(Answered(), started);
  EXPECT_GE(Answered(), answered);
}

// A request counts as started before the kubelet answers it: RequestsStarted() moves on, Latest() does not.
// One request only: the next poll is a minute away.
TEST_F(PodResourcesPollerTest, ASlowKubeletsRequestIsStartedButNotAnswered) {
  config_.device_plugin.pod_resources_poll_ms = 60000;
  ASSERT_TRUE(kubelet_->Start().ok());
  kubelet_->PausePodResources(true);
  poller_->Start();
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->PodResourcesLists() >= 1; }, kWait));
  EXPECT_EQ(poller_->RequestsStarted(), 1u);
  EXPECT_FALSE(poller_->WaitForAnswer(1ms));
  EXPECT_EQ(Answered(), 0u);

  HoldCore("p", "GPU-a", 30);  // before the kubelet answers request 1
  kubelet_->PausePodResources(false);
  ASSERT_TRUE(poller_->WaitForAnswer(kWait));
  EXPECT_EQ(Answered(), 1u);
  EXPECT_EQ(poller_->RequestsStarted(), 1u);
  EXPECT_EQ(poller_->Latest(), CoreOf("p", "GPU-a", 30));
}

TEST_F(PodResourcesPollerTest, StopEndsAWaitForTheFirstAnswer) {
  poller_->Start();
  std::atomic<bool> answered = true, returned = false;
  std::thread waiter([&] {
    answered = poller_->WaitForAnswer(kLong);
    returned = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return poller_->RequestsStarted() >= 1; }, kWait));
  poller_->Stop();
  EXPECT_TRUE(WaitUntil([&] { return returned.load(); }, kWait));
  waiter.join();
  EXPECT_FALSE(answered);
}

}  // namespace
}  // namespace mgpu::dp
