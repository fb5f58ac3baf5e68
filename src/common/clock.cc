#include "common/clock.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace mgpu {

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Rfc3339(int64_t unix_ns, bool micros) {
  constexpr int64_t kBillion = 1'000'000'000;
  int64_t seconds = unix_ns / kBillion, fraction = unix_ns % kBillion;
  if (fraction < 0) --seconds, fraction += kBillion;
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[48];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  if (micros) {
    std::snprintf(text + n, sizeof text - n, ".%06lldZ", static_cast<long long>(fraction / 1000));
  } else {
    std::snprintf(text + n, sizeof text - n, "Z");
  }
  return text;
}

}  // namespace mgpu
