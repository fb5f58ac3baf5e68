// Kubernetes quantity syntax ("30", "4096", "4Ki", "1e3", "2000m") read as a whole, non-negative number.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace mgpu {

// Parses `text`; fails with a sentence for anything that is not a whole number (e.g. "1.5", "500m").
Result<int64_t> ParseWholeQuantity(std::string_view text);

// The quantity in thousandths, rounded up ("500m" → 500, "1.5" → 1500, "1u" → 1): CPU in millicores.
Result<int64_t> ParseMilliQuantity(std::string_view text);

// The quantity divided by 2^20, rounded up ("1Gi" → 1024, "1G" → 954): memory bytes in MiB.
Result<int64_t> ParseMebiQuantity(std::string_view text);

// What a quantity is read as: a whole number (ParseWholeQuantity), thousandths (ParseMilliQuantity) or MiB
// (ParseMebiQuantity).
enum class QuantityUnit { kWhole, kMilli, kMebi };

// A JSON value read as a quantity in `unit`: a quantity string, or a number (YAML manifests converted to JSON
// carry numbers; a whole quantity must be a whole number).
Result<int64_t> ParseQuantityJson(const nlohmann::json& value, QuantityUnit unit = QuantityUnit::kWhole);

}  // namespace mgpu
