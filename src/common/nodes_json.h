// The read-only per-card view of the cache of cards as JSON (the extender's GET /v1/nodes, kubectl mgpu nodes
// -o json): the edge that encodes what common/cluster_cache.h holds.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "common/cluster_cache.h"

namespace mgpu {

// `nodes`: ClusterView::Nodes(), or some of them.
nlohmann::json NodesJson(const std::vector<const NodeView*>& nodes);

}  // namespace mgpu
