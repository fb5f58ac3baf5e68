#include "support/assigned_pod.h"

#include "common/codec.h"
#include "common/config.h"

namespace mgpu::testing {

nlohmann::json AssignedPod(const std::string& name, const std::string& node, const Assignment& assignment,
                           int64_t memory_unit_mib, int64_t assume_ns) {
  const ResourceNames names = Config().Names();
  nlohmann::json containers = nlohmann::json::array();
  for (const ContainerAssignment& c : assignment.containers) {
    int core = 0;
    int64_t memory_mib = 0;
    for (const CardShare& s : c.cards) {
      core += s.core;
      memory_mib += s.memory_mib;
    }
    containers.push_back({{"name", c.container},
                          {"resources",
                           {{"limits",
                             {{names.core, std::to_string(core)},
                              {names.memory, std::to_string(memory_mib / memory_unit_mib)}}}}}});
  }
  return {{"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"annotations",
             {{names.gpu_assignment, EncodeAssignment(assignment)},
              {names.gpu_assume_time, EncodeAssumeTime(assume_ns)}}}}},
          {"spec", {{"nodeName", node}, {"containers", containers}}},
          {"status", {{"phase", "Pending"}}}};
}

}  // namespace mgpu::testing
