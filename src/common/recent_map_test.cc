#include "common/recent_map.h"

#include <gtest/gtest.h>

#include <string>

namespace mgpu {
namespace {

TEST(RecentMapTest, DropsTheOldestPastItsCapacityAndAReplacedEntryKeepsItsAge) {
  RecentMap<int> map(3);
  EXPECT_TRUE(map.Put("a", 1));
  EXPECT_TRUE(map.Put("b", 2));
  EXPECT_TRUE(map.Put("c", 3));
  EXPECT_FALSE(map.Put("a", 10));  // replaced, still the oldest
  ASSERT_NE(map.Find("a"), nullptr);
  EXPECT_EQ(*map.Find("a"), 10);
  EXPECT_TRUE(map.Put("d", 4));
  EXPECT_EQ(map.Find("a"), nullptr);
  EXPECT_EQ(map.size(), 3u);
  EXPECT_EQ(*map.Find("b"), 2);
  EXPECT_EQ(*map.Find("d"), 4);
}

TEST(RecentMapTest, AnErasedEntryIsGoneAtOnceAndLeavesNothingBehind) {
  RecentSet set(2);
  EXPECT_TRUE(set.Put("uid-1"));
  EXPECT_FALSE(set.Put("uid-1"));
  set.Erase("uid-1");
  set.Erase("never-there");
  EXPECT_EQ(set.size(), 0u);
  EXPECT_EQ(set.Find("uid-1"), nullptr);
  // Erased entries take no place: two more fit without dropping either.
  for (int i = 0; i < 1000; ++i) {
    set.Put("uid-" + std::to_string(i));
    set.Erase("uid-" + std::to_string(i));
  }
  EXPECT_TRUE(set.Put("x"));
  EXPECT_TRUE(set.Put("y"));
  EXPECT_NE(set.Find("x"), nullptr);
  EXPECT_NE(set.Find("y"), nullptr);
  EXPECT_EQ(set.size(), 2u);
}

}  // namespace
}  // namespace mgpu
