#include "node/node_metadata.h"

#include <algorithm>

#include "common/codec.h"

namespace mgpu::node {

kube::MetadataPatch NodeMetadata(const std::vector<Card>& cards, const Config& config,
                                 const std::string& version, int64_t heartbeat_unix_s, bool stopping) {
  const ResourceNames names = config.Names();
  NodeInventory inventory;
  inventory.cards = cards;
  std::sort(inventory.cards.begin(), inventory.cards.end(),
            [](const Card& a, const Card& b) { return a.index < b.index; });
  inventory.memory_unit_mib = config.memory_unit_mib;
  inventory.isolation = config.isolation.backend;
  inventory.version = version;
  inventory.heartbeat = heartbeat_unix_s;
  inventory.stopping = stopping;
  kube::MetadataPatch patch;
  patch.annotations[names.gpu_inventory] = EncodeInventory(inventory);
  patch.annotations[names.gpu_dra_inventory] =
      std::nullopt;  // a node that served its cards through DRA before
  patch.labels[names.label_count] = std::to_string(cards.size());
  if (inventory.cards.empty()) {
    patch.labels[names.label_product] = std::nullopt;
    patch.labels[names.label_memory] = std::nullopt;
  } else {
    patch.labels[names.label_product] = LabelValue(inventory.cards.front().model);
    patch.labels[names.label_memory] = std::to_string(inventory.cards.front().memory_mib);
  }
  return patch;
}
}  // namespace mgpu::node
