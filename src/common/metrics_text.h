// Prometheus text exposition helpers shared by both daemons' /metrics.
#pragma once

#include <string>
#include <string_view>

namespace mgpu {

// A label value with backslash, double quote and newline escaped as the text format requires.
std::string EscapeLabelValue(std::string_view value);

}  // namespace mgpu
