// What a node daemon publishes on its Node in either mode (DESIGN §7): the D/gpu-inventory annotation (the
// codec of common/codec.h, with a heartbeat) and the D/gpu.product, D/gpu.count and D/gpu.memory labels for
// nodeSelector. Pure. The device-plugin mode patches it on a heartbeat (deviceplugin/node_publisher.h); the
// DRA mode patches the labels once and the inventory as D/gpu-dra-inventory instead (dra/publisher.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/kube/client.h"
#include "common/model.h"

namespace mgpu::node {

// The annotation and labels for `cards`. The labels describe the card with the lowest index. `stopping`: the
// inventory says the plugin is stopping (NodeInventory::stopping).
kube::MetadataPatch NodeMetadata(const std::vector<Card>& cards, const Config& config,
                                 const std::string& version, int64_t heartbeat_unix_s, bool stopping = false);

}  // namespace mgpu::node
