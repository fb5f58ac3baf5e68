// Reading a whole file, for configs, manifests and fixtures.
#pragma once

#include <string>

#include "common/result.h"

namespace mgpu {

// The file's bytes, or "cannot read PATH".
Result<std::string> ReadFile(const std::string& path);

}  // namespace mgpu
