#include "common/text_table.h"

#include <gtest/gtest.h>

namespace mgpu {
namespace {

TEST(TextTable, AlignsColumnsAndLeavesTheLastUnpadded) {
  EXPECT_EQ(FormatTable({{"NODE", "CARD", "PODS"}, {"node-a10", "0", "a,b"}, {"n", "10", "-"}}),
            "NODE      CARD  PODS\n"
            "node-a10  0     a,b\n"
            "n         10    -\n");
  EXPECT_EQ(FormatTable({}), "");
}

}  // namespace
}  // namespace mgpu
