// The kubelet calls each resource server served, as /metrics reports them (metrics.h), below the servers.
#pragma once

#include <cstdint>

namespace mgpu::dp {

struct CallCounts {
  uint64_t preferred = 0;
  uint64_t preferred_matched = 0;  // answered from a pending pod's assignment
  uint64_t preferred_errors = 0;
  uint64_t allocate = 0;
  uint64_t allocate_errors = 0;
  uint64_t split = 0;  // a container's second resource landed on other cards than its first
};

}  // namespace mgpu::dp
