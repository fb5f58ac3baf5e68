// The one codec of each annotation mgpu writes (DESIGN §5, §7). Every side encodes and decodes through these;
// decoding is strict and names the field at fault.
//   D/gpu-inventory (node):  {"cards":[{"index","uuid","model","memoryMiB","healthy"}],
//                             "memoryUnitMiB","isolation","version","heartbeat"}
//   D/gpu-assignment and D/gpu-allocated (pod), one format:
//                            {"containers":[{"name","cards":[{"uuid","core","reclaimedCore","memoryMiB"}]}]}
//   D/gpu-assume-time (pod): unix nanoseconds as a decimal string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/model.h"
#include "common/result.h"

namespace mgpu {

// The longest annotation value a decoder reads: the API server's own limit on all of an object's annotations
// together (256 KiB), so only a corrupt or hostile source meets it.
inline constexpr size_t kMaxAnnotationBytes = size_t{256} << 10;

std::string EncodeInventory(const NodeInventory& inventory);
Result<NodeInventory> DecodeInventory(std::string_view text);

std::string EncodeAssignment(const Assignment& assignment);
Result<Assignment> DecodeAssignment(std::string_view text);

std::string EncodeAssumeTime(int64_t unix_ns);
Result<int64_t> DecodeAssumeTime(std::string_view text);

}  // namespace mgpu
