// Every call mgpu-device-plugin makes to the API server (see common/kube/api_call.h).
#pragma once

#include "common/kube/api_call.h"

namespace mgpu::dp {

inline constexpr kube::ApiCall kApiCalls[] = {
    {"", "pods", "list"},  // the pods of its node (the informer, and the bounded re-read of DESIGN §5.2)
    {"", "pods", "watch"},    {"", "pods", "patch"},  // D/gpu-allocated
    {"", "nodes", "patch"},                           // D/gpu-inventory
    {"", "events", "create"},                         // GPUAllocated, GPUAllocationFailed, ...
    {"apps", "replicasets", "get"},                   // a pod's shape: its workload's annotations
    {"apps", "deployments", "get"},
    {"apps", "statefulsets", "get"},
    {"apps", "daemonsets", "get"},
    {"batch", "jobs", "get"},
    // At start, a node that served its cards through DRA before loses its slices (docs/dra.md §1).
    {"resource.k8s.io", "resourceslices", "list"},
    {"resource.k8s.io", "resourceslices", "delete"},
};

}  // namespace mgpu::dp
