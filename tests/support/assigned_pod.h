// A pod as the extender's bind leaves it, for the tests and benchmarks of the device plugin's side of the
// hand-off (DESIGN §5).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/model.h"

namespace mgpu::testing {

// A Pending pod in "default" bound to `node`: one container per entry of `assignment`, each asking (as
// limits) the mgpu-core and the memory units (of `memory_unit_mib`) its cards hold in total, with
// D/gpu-assignment and D/gpu-assume-time (`assume_ns`) set.
nlohmann::json AssignedPod(const std::string& name, const std::string& node, const Assignment& assignment,
                           int64_t memory_unit_mib, int64_t assume_ns);

}  // namespace mgpu::testing
