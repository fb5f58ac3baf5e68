// Device discovery for the DRA mode: the node's cards as the GPU backend finds them (the same backends as the
// device-plugin mode, node/gpu_backend.h), each with the memory capacity its devices publish and the
// device nodes a container given the card needs. Pure apart from checking which device nodes exist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "node/gpu_backend.h"

namespace mgpu::dra {

struct NodeCard {
  Card card;
  int64_t capacity_mib =
      0;                   // memory less reservedMemoryMiB, rounded down to memoryUnitMiB (allocator's rule)
  std::string pci_bus_id;  // empty when unknown
  // Host paths of the device nodes a container of this card needs (CDI deviceNodes): the card's
  // /dev/nvidia<minor> and the driver's control nodes, those that exist; none when the minor is unknown.
  std::vector<std::string> device_nodes;

  bool operator==(const NodeCard&) const = default;
};

// The control nodes every NVIDIA container needs beside its cards' own, relative to the device root.
inline constexpr const char* kControlDeviceNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

// The cards of `gpus` by index. Device nodes are looked up under `device_root` (the host's /dev as the daemon
// sees it) and named as /dev/... in the result.
std::vector<NodeCard> NodeCardsOf(const std::vector<node::GpuInfo>& gpus, const Config& config,
                                  const std::string& device_root = "/dev");

// The card with `index`, or null.
const NodeCard* FindCard(const std::vector<NodeCard>& cards, int index);

}  // namespace mgpu::dra
