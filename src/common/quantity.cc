#include "common/quantity.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <string>

namespace mgpu {
namespace {

struct Suffix {
  std::string_view text;
  int base2_exponent;
  int base10_exponent;
};

constexpr Suffix kSuffixes[] = {
    {"Ki", 10, 0}, {"Mi", 20, 0}, {"Gi", 30, 0}, {"Ti", 40, 0}, {"Pi", 50, 0}, {"Ei", 60, 0},
    {"n", 0, -9},  {"u", 0, -6},  {"m", 0, -3},  {"", 0, 0},    {"k", 0, 3},   {"M", 0, 6},
    {"G", 0, 9},   {"T", 0, 12},  {"P", 0, 15},  {"E", 0, 18},
};

constexpr __int128 kMax = INT64_MAX;

Error Bad(std::string_view text, std::string_view why) {
  return Error{"\"" + std::string(text) + "\" " + std::string(why)};
}

// The quantity `text` times 10^scale10 / 2^divide2: exact when `whole`, else rounded up.
Result<int64_t> Scaled(std::string_view text, int scale10, int divide2, bool whole) {
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  if (i < text.size() && text[i] == '-') return Bad(text, "is negative");
  // Mantissa: digits with at most one decimal point.
  __int128 mantissa = 0;
  int fraction_digits = 0;
  bool seen_point = false, seen_digit = false;
  for (; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '.' && !seen_point) {
      seen_point = true;
    } else if (std::isdigit(static_cast<unsigned char>(ch))) {
      seen_digit = true;
      if (mantissa > kMax) return Bad(text, "is too large");
      mantissa = mantissa * 10 + (ch - '0');
      if (seen_point) ++fraction_digits;
    } else {
      break;
    }
  }
  if (!seen_digit) return Bad(text, "is not a number");
  // Suffix: a known unit, or a decimal exponent e<N> / E<N>.
  const std::string_view rest = text.substr(i);
  int base2 = 0, base10 = 0;
  bool matched = false;
  for (const auto& s : kSuffixes) {
    if (rest == s.text) {
      base2 = s.base2_exponent;
      base10 = s.base10_exponent;
      matched = true;
      break;
    }
  }
  if (!matched) {
    if (rest.size() < 2 || (rest[0] != 'e' && rest[0] != 'E')) return Bad(text, "has an unknown unit");
    size_t j = 1;
    bool negative = false;
    if (rest[j] == '+' || rest[j] == '-') negative = rest[j++] == '-';
    if (j >= rest.size() || rest.size() - j > 3) return Bad(text, "has a bad exponent");
    for (; j < rest.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(rest[j]))) return Bad(text, "has a bad exponent");
      base10 = base10 * 10 + (rest[j] - '0');
    }
    if (negative) base10 = -base10;
  }
  base10 += scale10 - fraction_digits;
  base2 -= divide2;
  // value = mantissa · 2^base2 · 10^base10: multiply first, then divide what is left, rounding up.
  __int128 value = mantissa;
  for (; base2 > 0; --base2) {
    value *= 2;
    if (value > kMax) return Bad(text, "is too large");
  }
  for (; base10 > 0; --base10) {
    value *= 10;
    if (value > kMax) return Bad(text, "is too large");
  }
  bool inexact = false;
  for (; base2 < 0; ++base2) {
    inexact |= value % 2 != 0;
    value /= 2;
  }
  for (; base10 < 0; ++base10) {
    inexact |= value % 10 != 0;
    value /= 10;
  }
  if (inexact && whole) return Bad(text, "is not a whole number");
  if (inexact) ++value;
  if (value > kMax) return Bad(text, "is too large");
  return static_cast<int64_t>(value);
}

}  // namespace

Result<int64_t> ParseWholeQuantity(std::string_view text) { return Scaled(text, 0, 0, true); }

Result<int64_t> ParseMilliQuantity(std::string_view text) { return Scaled(text, 3, 0, false); }

Result<int64_t> ParseMebiQuantity(std::string_view text) { return Scaled(text, 0, 20, false); }

Result<int64_t> ParseQuantityJson(const nlohmann::json& value, QuantityUnit unit) {
  const auto parse = [unit](std::string_view text) {
    return unit == QuantityUnit::kMilli  ? ParseMilliQuantity(text)
           : unit == QuantityUnit::kMebi ? ParseMebiQuantity(text)
                                         : ParseWholeQuantity(text);
  };
  if (value.is_string()) return parse(value.get_ref<const std::string&>());
  if (value.is_number() && unit != QuantityUnit::kWhole) return parse(value.dump());  // 0.5 CPU, 1e9 bytes
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Error{value.dump() + " is too large"};
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) {
    if (value.get<int64_t>() < 0) return Error{value.dump() + " is negative"};
    return value.get<int64_t>();
  }
  if (value.is_number_float()) return Error{value.dump() + " is not a whole number"};
  // Not the value itself: it may be large.
  return Error{std::string("a JSON ") + value.type_name() + " is not a quantity"};
}

}  // namespace mgpu
