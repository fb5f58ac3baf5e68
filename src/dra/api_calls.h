// Every call the node daemon makes to the API server in DRA mode (see common/kube/api_call.h); deploy/dra/
// grants exactly these.
#pragma once

#include "common/kube/api_call.h"

namespace mgpu::dra {

inline constexpr kube::ApiCall kApiCalls[] = {
    {"resource.k8s.io", "resourceslices", "list"},  // its node's pool (the publisher's informer)
    {"resource.k8s.io", "resourceslices", "watch"},
    {"resource.k8s.io", "resourceslices", "create"},
    {"resource.k8s.io", "resourceslices", "update"},
    {"resource.k8s.io", "resourceslices", "delete"},
    {"resource.k8s.io", "resourceclaims", "get"},  // once per claim it prepares
    {"", "nodes", "patch"},                        // D/gpu.* labels, no D/gpu-inventory
};

}  // namespace mgpu::dra
