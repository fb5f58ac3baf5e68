// Helpers shared by src/common tests only.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/allocator.h"
#include "common/config.h"
#include "common/request.h"
#include "common/yaml_json.h"

namespace mgpu::test {

inline nlohmann::json Yaml(std::string_view text) {
  auto docs = YamlDocumentsToJson(text);
  EXPECT_TRUE(docs.ok()) << (docs.ok() ? "" : docs.message());
  return docs.ok() && !docs->empty() ? docs->front() : nlohmann::json();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A node of `count` identical cards named GPU-<node>-<i>.
inline NodeState Node(const std::string& name, int count, int64_t memory_mib,
                      const Config& config = Config()) {
  NodeInventory inv;
  for (int i = 0; i < count; ++i) {
    inv.cards.push_back(Card{i, "GPU-" + name + "-" + std::to_string(i), "NVIDIA A10", memory_mib, true});
  }
  inv.memory_unit_mib = config.memory_unit_mib;
  return MakeNodeState(name, inv, config);
}

inline PodRequest MustParse(const nlohmann::json& pod, const Config& config = Config(),
                            const Annotations& workload = {}) {
  auto r = ParsePodRequest(pod, config, workload);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.message());
  return r.ok() ? *r : PodRequest();
}

// What placing `pod` on `node` costs under `policy` (Place + PlacementCost); the pod must fit.
inline double CostOf(const NodeState& node, const PodRequest& pod, NodePolicy policy,
                     const WorkloadModel* workload = nullptr) {
  Placement placed;
  EXPECT_TRUE(Place(node, pod, workload, placed))
      << "pod " << pod.Key() << " does not fit node " << node.name;
  return PlacementCost(node, pod, placed, policy, workload);
}

}  // namespace mgpu::test
