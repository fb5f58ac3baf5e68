// Plain-text tables as kubectl prints them: columns left-aligned, two spaces apart, the last one unpadded.
#pragma once

#include <string>
#include <vector>

namespace mgpu {

// One line per row (the first row is usually the upper-case header), each ending in a newline.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace mgpu
