#include "guard/state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace mgpu::guard {
namespace {

constexpr const char* kCard = "GPU-00000000-0000-0000-0000-000000000001";

std::unique_ptr<StateFile> Fresh() {
  auto f = std::make_unique<StateFile>();
  InitState(*f, kCard);
  return f;
}

TEST(GuardState, AFreshStateIsValidForItsCardOnly) {
  auto f = Fresh();
  EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "");
  EXPECT_STRNE(CheckState(*f, kStateFileBytes, "GPU-other"), "");
}

TEST(GuardState, RejectsWrongMagicVersionSizesAndTruncation) {
  auto f = Fresh();
  f->header.magic ^= 1;
  EXPECT_STRNE(CheckState(*f, kStateFileBytes, kCard), "");
  f = Fresh();
  f->header.version = kStateVersion + 1;
  EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "the file has another layout version");
  f = Fresh();
  f->header.max_processes = kMaxProcesses * 2;
  EXPECT_STRNE(CheckState(*f, kStateFileBytes, kCard), "");
  f = Fresh();
  EXPECT_STREQ(CheckState(*f, kStateFileBytes - 1, kCard), "the file is truncated");
  EXPECT_STRNE(CheckState(*f, 10, kCard), "");
}

TEST(GuardState, AcceptsEveryMinorVersionOfItsLayout) {
  // Minor versions only add fields in reserved bytes: a reader of any minor version takes them all.
  for (uint32_t minor : {0u, kStateMinorVersion, kStateMinorVersion + 5}) {
    auto f = Fresh();
    f->header.minor_version = minor;
    EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "") << minor;
  }
  EXPECT_EQ(Fresh()->header.minor_version, kStateMinorVersion);
}

TEST(GuardState, RejectsRecordsThatPointOutOfBounds) {
  auto f = Fresh();
  f->processes[3].in_use = 1;
  f->processes[3].container = kMaxContainers;
  EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "a process slot names no container");
  f = Fresh();
  f->containers[0].in_use = 1;
  memset(f->containers[0].token, 'x', kTokenBytes);  // no terminating NUL
  EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "a container record is malformed");
  f = Fresh();
  memset(f->header.card_uuid, 'x', kUuidBytes);
  EXPECT_STREQ(CheckState(*f, kStateFileBytes, kCard), "the file belongs to another card");
}

TEST(GuardState, UsedBytesSumTheContainersSlots) {
  auto f = Fresh();
  f->processes[0] = {1, 2, 10, 0, 100, 0, 0, {}};
  f->processes[5] = {1, 2, 11, 0, 50, 0, 0, {}};
  f->processes[6] = {1, 3, 12, 0, 7, 0, 0, {}};
  f->processes[7] = {0, 2, 13, 0, 1000, 0, 0, {}};  // free slot: not counted
  EXPECT_EQ(ContainerUsedBytes(*f, 2), 150u);
  EXPECT_EQ(ContainerUsedBytes(*f, 3), 7u);
}

TEST(GuardState, ReadingAMissingFileSaysSo) {
  CardSnapshot s;
  std::string error;
  EXPECT_FALSE(ReadCardState("/nonexistent-mgpu", kCard, s, error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace mgpu::guard
