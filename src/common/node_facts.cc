#include "common/node_facts.h"

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "common/json_path.h"
#include "common/quantity.h"

namespace mgpu {

NodeFacts ReadNode(const nlohmann::json& node, const Config& config) {
  NodeFacts out;
  out.name = MetadataString(node, "name");
  const Annotations annotations = AnnotationsOf(node);
  const ResourceNames names = config.Names();
  // A node switching modes may briefly carry both; it takes no device-plugin pod from then on.
  auto it = annotations.find(names.gpu_dra_inventory);
  out.dra = it != annotations.end();
  if (!out.dra) it = annotations.find(names.gpu_inventory);
  const std::string& key = out.dra ? names.gpu_dra_inventory : names.gpu_inventory;
  out.annotated = it != annotations.end();
  if (out.annotated) {
    Result<NodeInventory> inventory = DecodeInventory(it->second);
    if (!inventory.ok()) {
      out.problem = "node " + out.name + " has an unreadable " + key + " annotation (" + inventory.message() +
                    "); check mgpu-device-plugin there";
      out.reason = "unreadable " + key + " annotation";
    } else if (inventory->memory_unit_mib != config.memory_unit_mib) {
      out.problem = "node " + out.name + " counts mgpu-memory in units of " +
                    std::to_string(inventory->memory_unit_mib) + " MiB but the extender's memoryUnitMiB is " +
                    std::to_string(config.memory_unit_mib) + "; use one memoryUnitMiB cluster-wide";
      out.reason = "mgpu-memory counted in other units than the extender's memoryUnitMiB";
    } else {
      // A stopping plugin's node keeps its cards and pods in view (kubectl mgpu, the metrics) but takes no new
      // pod: the kubelet would fail its admission once the plugin is gone.
      if (inventory->stopping) {
        out.problem =
            "node " + out.name + "'s mgpu-device-plugin is stopping; its cards take no new pods until it is back";
        out.reason = "mgpu-device-plugin stopping";
      }
      out.inventory = std::move(*inventory);
    }
  }
  Result<int64_t> cpu = ParseMilliQuantity(StringAt(node, {"status", "allocatable", "cpu"}));
  Result<int64_t> memory = ParseMebiQuantity(StringAt(node, {"status", "allocatable", "memory"}));
  if (cpu.ok() && memory.ok()) out.allocatable = HostRequest{*cpu, *memory};
  return out;
}

}  // namespace mgpu
