#include "guard/settings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mgpu::guard {
namespace {

constexpr const char* kCard = "GPU-0a1b2c3d-0000-1111-2222-333344445555";

// An environment block built from "NAME=value" strings, the guard's required settings first.
class Environment {
 public:
  explicit Environment(std::vector<std::string> extra = {}, bool base = true) {
    if (base) {
      strings_ = {std::string("MGPU_VISIBLE_CARDS=") + kCard, "MGPU_MEMORY_MIB=100",
                  "MGPU_CONTAINER_TOKEN=tok-1"};
    }
    // A later setting of the same name replaces the earlier one.
    for (const std::string& e : extra) {
      const std::string name = e.substr(0, e.find('='));
      std::erase_if(strings_, [&](const std::string& s) { return s.substr(0, s.find('=')) == name; });
      if (e.find('=') != std::string::npos) strings_.push_back(e);
    }
    for (const std::string& s : strings_) pointers_.push_back(s.c_str());
    pointers_.push_back(nullptr);
  }
  const char* const* get() const { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<const char*> pointers_;
};

std::string Parse(const Environment& env, Settings& s) { return ParseSettings(env.get(), s); }

TEST(GuardSettings, TheRequiredSettingsAloneGiveTheDefaults) {
  Settings s;
  ASSERT_EQ(Parse(Environment(), s), "");
  EXPECT_EQ(s.card_count, 1);
  EXPECT_STREQ(s.cards[0], kCard);
  EXPECT_EQ(s.cap_bytes, 100u << 20);
  EXPECT_STREQ(s.token, "tok-1");
  EXPECT_EQ(s.qos, QosLevel::kOnline);
  EXPECT_EQ(s.policy, SharePolicy::kFixedShare);
  EXPECT_EQ(s.share_percent, 0u);
  EXPECT_STREQ(s.state_dir, "/var/lib/mgpu/cards");
  EXPECT_EQ(s.release_ns, 100'000'000u);
  EXPECT_FALSE(s.log);
}

TEST(GuardSettings, ReadsEverySetting) {
  Settings s;
  ASSERT_EQ(
      Parse(Environment({std::string("MGPU_VISIBLE_CARDS=") + kCard + ",GPU-2", "MGPU_MEMORY_MIB=4096",
                         "MGPU_QOS_LEVEL=offline", "MGPU_RECLAIMED_CORE_PERCENT=40", "MGPU_CORE_PERCENT=90",
                         "MGPU_COMPUTE_POLICY=guaranteed-burst-share", "MGPU_GUARD_STATE_DIR=/tmp/cards",
                         "MGPU_GUARD_RELEASE_MS=10", "MGPU_GUARD_LOG=1"}),
            s),
      "");
  EXPECT_EQ(s.card_count, 2);
  EXPECT_STREQ(s.cards[1], "GPU-2");
  EXPECT_EQ(s.cap_bytes, uint64_t{4096} << 20);
  EXPECT_EQ(s.qos, QosLevel::kOffline);
  EXPECT_EQ(s.share_percent, 40u);  // offline reads the reclaimed percent, not MGPU_CORE_PERCENT
  EXPECT_EQ(s.policy, SharePolicy::kGuaranteedBurstShare);
  EXPECT_STREQ(s.state_dir, "/tmp/cards");
  EXPECT_EQ(s.release_ns, 10'000'000u);
  EXPECT_TRUE(s.log);
  Settings online;
  ASSERT_EQ(Parse(Environment({"MGPU_CORE_PERCENT=30", "MGPU_RECLAIMED_CORE_PERCENT=90",
                               "MGPU_COMPUTE_POLICY=native-burst-share", "MGPU_GUARD_LOG=0"}),
                  online),
            "");
  EXPECT_EQ(online.share_percent, 30u);
  EXPECT_EQ(online.policy, SharePolicy::kNativeBurstShare);
  EXPECT_FALSE(online.log);
}

TEST(GuardSettings, EachBadSettingIsNamedInOneSentence) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"MGPU_VISIBLE_CARDS"}, "MGPU_VISIBLE_CARDS is not set"},
      {{"MGPU_VISIBLE_CARDS="}, "MGPU_VISIBLE_CARDS is not set"},
      {{"MGPU_VISIBLE_CARDS=GPU-1,,GPU-2"}, "MGPU_VISIBLE_CARDS is not a list of card UUIDs"},
      {{"MGPU_VISIBLE_CARDS=../etc"}, "MGPU_VISIBLE_CARDS is not a list of card UUIDs"},
      {{"MGPU_VISIBLE_CARDS=" + std::string(200, 'x')}, "MGPU_VISIBLE_CARDS is not a list of card UUIDs"},
      {{"MGPU_MEMORY_MIB"}, "MGPU_MEMORY_MIB is missing or not a positive whole number"},
      {{"MGPU_MEMORY_MIB=0"}, "MGPU_MEMORY_MIB is missing or not a positive whole number"},
      {{"MGPU_MEMORY_MIB=-5"}, "MGPU_MEMORY_MIB is missing or not a positive whole number"},
      {{"MGPU_MEMORY_MIB=12 GiB"}, "MGPU_MEMORY_MIB is missing or not a positive whole number"},
      {{"MGPU_MEMORY_MIB=99999999999999999999"}, "MGPU_MEMORY_MIB is missing or not a positive whole number"},
      {{"MGPU_CONTAINER_TOKEN"}, "MGPU_CONTAINER_TOKEN is missing or not a token"},
      {{"MGPU_CONTAINER_TOKEN=a/b"}, "MGPU_CONTAINER_TOKEN is missing or not a token"},
      {{"MGPU_CONTAINER_TOKEN=" + std::string(kTokenBytes, 'a')},
       "MGPU_CONTAINER_TOKEN is missing or not a token"},
      {{"MGPU_QOS_LEVEL=batch"}, "MGPU_QOS_LEVEL must be online or offline"},
      {{"MGPU_CORE_PERCENT=101"}, "the core percent is not a whole number from 0 to 100"},
      {{"MGPU_QOS_LEVEL=offline", "MGPU_RECLAIMED_CORE_PERCENT=half"},
       "the core percent is not a whole number"},
      {{"MGPU_COMPUTE_POLICY=fair"}, "MGPU_COMPUTE_POLICY is not fixed-share, guaranteed-burst-share or"},
      {{"MGPU_GUARD_STATE_DIR="}, "MGPU_GUARD_STATE_DIR is empty or too long"},
      {{"MGPU_GUARD_STATE_DIR=/" + std::string(600, 'd')}, "MGPU_GUARD_STATE_DIR is empty or too long"},
      {{"MGPU_GUARD_RELEASE_MS=fast"}, "MGPU_GUARD_RELEASE_MS is not a whole number of milliseconds"},
      {{"MGPU_GUARD_RELEASE_MS=600001"}, "MGPU_GUARD_RELEASE_MS is not a whole number of milliseconds"},
  };
  for (const auto& [extra, start] : cases) {
    Settings s;
    const std::string why = Parse(Environment(extra), s);
    EXPECT_EQ(why.rfind(start, 0), 0u) << extra[0] << ": " << why;
    EXPECT_NE(why.find("so the guard steps aside"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

TEST(GuardSettings, EnvValueMatchesWholeNamesOnly) {
  Environment env({"MGPU_A=1", "MGPU_AB=2", "MGPU_C="}, false);
  EXPECT_STREQ(EnvValue(env.get(), "MGPU_A"), "1");
  EXPECT_STREQ(EnvValue(env.get(), "MGPU_AB"), "2");
  EXPECT_STREQ(EnvValue(env.get(), "MGPU_C"), "");
  EXPECT_EQ(EnvValue(env.get(), "MGPU"), nullptr);
  EXPECT_EQ(EnvValue(nullptr, "MGPU_A"), nullptr);
}

}  // namespace
}  // namespace mgpu::guard
