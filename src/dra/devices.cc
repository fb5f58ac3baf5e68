#include "dra/devices.h"

#include <algorithm>
#include <filesystem>

#include "common/allocator.h"

namespace mgpu::dra {

std::vector<NodeCard> NodeCardsOf(const std::vector<node::GpuInfo>& gpus, const Config& config,
                                  const std::string& device_root) {
  NodeInventory inventory;
  inventory.memory_unit_mib = config.memory_unit_mib;
  for (const node::GpuInfo& g : gpus) inventory.cards.push_back(g.card);
  const NodeState node = MakeNodeState("", inventory, config);
  std::vector<NodeCard> out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    NodeCard c{gpus[i].card, node.cards[i].capacity_mib, gpus[i].pci_bus_id, {}};
    if (gpus[i].minor >= 0) {
      std::vector<std::string> names = {"nvidia" + std::to_string(gpus[i].minor)};
      names.insert(names.end(), std::begin(kControlDeviceNodes), std::end(kControlDeviceNodes));
      for (const std::string& n : names) {
        std::error_code ec;
        if (std::filesystem::exists(std::filesystem::path(device_root) / n, ec))
          c.device_nodes.push_back("/dev/" + n);
      }
    }
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(),
            [](const NodeCard& a, const NodeCard& b) { return a.card.index < b.card.index; });
  return out;
}

const NodeCard* FindCard(const std::vector<NodeCard>& cards, int index) {
  for (const NodeCard& c : cards) {
    if (c.card.index == index) return &c;
  }
  return nullptr;
}

}  // namespace mgpu::dra
