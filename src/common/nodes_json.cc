#include "common/nodes_json.h"

namespace mgpu {

using nlohmann::json;

json NodesJson(const std::vector<const NodeView*>& view) {
  json nodes = json::array();
  for (const NodeView* v : view) {
    json cards = json::array();
    for (const CardState& c : v->state.cards) {
      cards.push_back({{"index", c.card.index},
                       {"uuid", c.card.uuid},
                       {"model", c.card.model},
                       {"healthy", c.card.healthy},
                       {"capacityMiB", c.capacity_mib},
                       {"core", c.usage.core},
                       {"reclaimedCore", c.usage.reclaimed_core},
                       {"memoryMiB", c.usage.memory_mib},
                       {"holders", c.usage.holders},
                       {"policy", c.usage.holders ? json(Name(c.usage.policy)) : json(nullptr)}});
    }
    json pods = json::array();
    for (const PlacedPod& p : v->pods) {
      json containers = json::array();
      for (const ContainerAssignment& ca : p.assignment.containers) {
        json shares = json::array();
        for (const CardShare& s : ca.cards)
          shares.push_back({{"uuid", s.uuid},
                            {"core", s.core},
                            {"reclaimedCore", s.reclaimed_core},
                            {"memoryMiB", s.memory_mib}});
        containers.push_back({{"name", ca.container}, {"cards", shares}});
      }
      pods.push_back(
          {{"pod", p.key}, {"uid", p.uid}, {"allocated", p.allocated}, {"containers", containers}});
    }
    json node = {{"name", v->state.name}, {"cards", cards}, {"pods", pods}};
    if (!v->problem.empty()) node["problem"] = v->problem;
    nodes.push_back(std::move(node));
  }
  return {{"nodes", nodes}};
}

}  // namespace mgpu
