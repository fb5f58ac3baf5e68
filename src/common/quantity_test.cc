#include "common/quantity.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mgpu {
namespace {

TEST(Quantity, ParsesWholeNumbersInEverySyntax) {
  EXPECT_EQ(*ParseWholeQuantity("30"), 30);
  EXPECT_EQ(*ParseWholeQuantity("+30"), 30);
  EXPECT_EQ(*ParseWholeQuantity("4096"), 4096);
  EXPECT_EQ(*ParseWholeQuantity("4Ki"), 4096);
  EXPECT_EQ(*ParseWholeQuantity("1Mi"), 1048576);
  EXPECT_EQ(*ParseWholeQuantity("2k"), 2000);
  EXPECT_EQ(*ParseWholeQuantity("1.5k"), 1500);
  EXPECT_EQ(*ParseWholeQuantity("1e3"), 1000);
  EXPECT_EQ(*ParseWholeQuantity("12E1"), 120);
  EXPECT_EQ(*ParseWholeQuantity("2000m"), 2);
  EXPECT_EQ(*ParseWholeQuantity("0"), 0);
  EXPECT_EQ(*ParseWholeQuantity("0.5Ki"), 512);
}

TEST(Quantity, RejectsWhatIsNotAWholeNumber) {
  for (const char* bad :
       {"1.5", "500m", "", "abc", "-3", "3x", "1e", "1e-1", "1.5.5", "Ki", "99999999999999999999", "9Ei"}) {
    auto r = ParseWholeQuantity(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_EQ(ParseWholeQuantity("1.5").message(), "\"1.5\" is not a whole number");
  EXPECT_EQ(ParseWholeQuantity("3x").message(), "\"3x\" has an unknown unit");
}

TEST(Quantity, ReadsCpuInMillicoresRoundingUp) {
  EXPECT_EQ(*ParseMilliQuantity("500m"), 500);
  EXPECT_EQ(*ParseMilliQuantity("2"), 2000);
  EXPECT_EQ(*ParseMilliQuantity("1.5"), 1500);
  EXPECT_EQ(*ParseMilliQuantity("0.1"), 100);
  EXPECT_EQ(*ParseMilliQuantity("1u"), 1);  // a millionth of a core still asks for one millicore
  EXPECT_EQ(*ParseMilliQuantity("1500000n"), 2);
  EXPECT_EQ(*ParseMilliQuantity("1e-3"), 1);
  EXPECT_EQ(*ParseMilliQuantity("0"), 0);
  EXPECT_EQ(ParseMilliQuantity("two").message(), "\"two\" is not a number");
  EXPECT_FALSE(ParseMilliQuantity("-1").ok());
}

TEST(Quantity, ReadsMemoryInMebibytesRoundingUp) {
  EXPECT_EQ(*ParseMebiQuantity("1Gi"), 1024);
  EXPECT_EQ(*ParseMebiQuantity("512Mi"), 512);
  EXPECT_EQ(*ParseMebiQuantity("1G"), 954);  // 10^9 bytes = 953.67 MiB
  EXPECT_EQ(*ParseMebiQuantity("1"), 1);
  EXPECT_EQ(*ParseMebiQuantity("1048576"), 1);
  EXPECT_EQ(*ParseMebiQuantity("1048577"), 2);
  EXPECT_EQ(*ParseMebiQuantity("0"), 0);
  EXPECT_FALSE(ParseMebiQuantity("1Xi").ok());
}

TEST(Quantity, AcceptsJsonNumbersAndStrings) {
  using nlohmann::json;
  EXPECT_EQ(*ParseQuantityJson(json(30)), 30);
  EXPECT_EQ(*ParseQuantityJson(json("4Ki")), 4096);
  EXPECT_FALSE(ParseQuantityJson(json(1.5)).ok());
  EXPECT_FALSE(ParseQuantityJson(json(-1)).ok());
  EXPECT_FALSE(ParseQuantityJson(json(true)).ok());
  EXPECT_FALSE(ParseQuantityJson(json::array()).ok());
  // Thousandths and MiB read numbers as their text: a YAML `cpu: 0.5` is 500 millicores.
  EXPECT_EQ(*ParseQuantityJson(json(0.5), QuantityUnit::kMilli), 500);
  EXPECT_EQ(*ParseQuantityJson(json(2), QuantityUnit::kMilli), 2000);
  EXPECT_EQ(*ParseQuantityJson(json("250m"), QuantityUnit::kMilli), 250);
  EXPECT_EQ(*ParseQuantityJson(json(1048577), QuantityUnit::kMebi), 2);
  EXPECT_EQ(*ParseQuantityJson(json("1Gi"), QuantityUnit::kMebi), 1024);
  EXPECT_FALSE(ParseQuantityJson(json(-1), QuantityUnit::kMebi).ok());
  EXPECT_FALSE(ParseQuantityJson(json(true), QuantityUnit::kMilli).ok());
}

}  // namespace
}  // namespace mgpu
