// Every call mgpu-scheduler-extender makes to the API server (see common/kube/api_call.h).
#pragma once

#include "common/kube/api_call.h"

namespace mgpu::extender {

inline constexpr kube::ApiCall kApiCalls[] = {
    {"", "nodes", "list"},  // the node informer
    {"", "nodes", "watch"},
    {"", "pods", "list"},  // the pod informer
    {"", "pods", "watch"},
    {"", "pods", "get"},             // bind: a pod this replica did not filter
    {"", "pods/binding", "create"},  // bind, with D/gpu-assignment and D/gpu-assume-time as its annotations
    {"", "events", "create"},        // GPUAssigned
    {"apps", "replicasets", "get"},  // annotations a pod inherits
    {"apps", "deployments", "get"},
    {"apps", "statefulsets", "get"},
    {"apps", "daemonsets", "get"},
    {"batch", "jobs", "get"},
    {"coordination.k8s.io", "leases", "get"},  // leader election
    {"coordination.k8s.io", "leases", "create"},
    {"coordination.k8s.io", "leases", "update"},
};

// The DRA mode (deploy/dra/ grants it): /mutate creates the ResourceClaimTemplates the pods it rewrites name;
// /mutate-claims reads the templates and claims hand-written pods name; the claim informer counts what
// allocated claims hold, to score DRA pods' nodes.
inline constexpr kube::ApiCall kDraApiCalls[] = {
    {"resource.k8s.io", "resourceclaimtemplates", "create"},
    {"resource.k8s.io", "resourceclaimtemplates", "get"},
    {"resource.k8s.io", "resourceclaims", "get"},
    {"resource.k8s.io", "resourceclaims", "list"},
    {"resource.k8s.io", "resourceclaims", "watch"},
};

}  // namespace mgpu::extender
