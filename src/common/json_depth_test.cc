#include "common/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace mgpu {
namespace {

TEST(JsonDepth, CountsArraysAndObjectsButNotStrings) {
  EXPECT_TRUE(JsonDepthWithin("{}", 1));
  EXPECT_FALSE(JsonDepthWithin("[[]]", 1));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":[1,{"b":2}]})", 3));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":[1,{"b":2}]})", 2));
  EXPECT_TRUE(JsonDepthWithin(R"(["[[[[", "\"[[[["])", 1));
  EXPECT_TRUE(JsonDepthWithin("[][][][]", 1));
  EXPECT_TRUE(JsonDepthWithin("]]]][", 1));  // not JSON: the parser rejects it
}

TEST(JsonDepth, TheDefaultBoundLetsObjectsThroughAndStopsBrackets) {
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(JsonDepthWithin(ok));
  EXPECT_FALSE(JsonDepthWithin("[" + ok + "]"));
  EXPECT_FALSE(JsonDepthWithin(std::string(1 << 20, '{')));
}

}  // namespace
}  // namespace mgpu
