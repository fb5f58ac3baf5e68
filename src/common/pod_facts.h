// What every part reads from a pod object, read in one place: its identity, where it is bound, whether it
// still runs, and the hand-off annotations (DESIGN §5). The request itself is ParsePodRequest's (it needs the
// workload's annotations, which the caller looks up outside any lock). Edge JSON in, a plain struct out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"

namespace mgpu {

struct PodFacts {
  std::string key;  // PodKey
  std::string uid;
  std::string resource_version;
  std::string node;  // spec.nodeName; empty while unbound
  bool finished = false;  // status.phase Succeeded or Failed
  bool deleting = false;  // metadata.deletionTimestamp set
  std::optional<Assignment> assignment;  // D/gpu-assignment, when present and readable
  std::optional<Assignment> allocated;   // D/gpu-allocated, when present and readable
  int64_t assume_time_ns = 0;            // D/gpu-assume-time; 0 when absent or unreadable
  std::vector<std::string> problems;     // one sentence per annotation that could not be read

  // Bound and not finished: it holds what it asked for on its node.
  bool HoldsNode() const { return !node.empty() && !finished; }
};

PodFacts ReadPodFacts(const nlohmann::json& pod, const Config& config);

}  // namespace mgpu
