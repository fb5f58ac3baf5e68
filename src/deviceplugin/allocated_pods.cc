#include "deviceplugin/allocated_pods.h"

namespace mgpu::dp {

std::map<std::string, CardShare> UsageByCard(const AllocatedPods& pods) {
  std::map<std::string, CardShare> out;
  for (const auto& [pod, assignment] : pods) {
    for (const auto& c : assignment.containers) {
      for (const auto& s : c.cards) {
        CardShare& total = out[s.uuid];
        total.uuid = s.uuid;
        total.core += s.core;
        total.reclaimed_core += s.reclaimed_core;
        total.memory_mib += s.memory_mib;
      }
    }
  }
  return out;
}

}  // namespace mgpu::dp
