// The wall clock as the daemons write it, one way for every part: unix nanoseconds (D/gpu-assume-time) and
// RFC 3339 text in UTC (the timestamps of API objects). Decision code reads no clock; edges call these.
#pragma once

#include <cstdint>
#include <string>

namespace mgpu {

// Now, in nanoseconds since the unix epoch.
int64_t UnixNowNs();

// `unix_ns` as RFC 3339 in UTC, to the second ("2025-01-02T11:03:58Z", metav1.Time) or, with `micros`, to
// the microsecond ("2025-01-02T11:03:58.123456Z", metav1.MicroTime).
std::string Rfc3339(int64_t unix_ns, bool micros = false);

}  // namespace mgpu
