// What `kubectl apply` plus the controllers would leave in the API server for a YAML stream of workloads, for
// the demo and the end-to-end tests: a Pod as written; a Deployment with its ReplicaSet; a ReplicaSet,
// StatefulSet or Job as written; and their pods (named as common/manifest.h names them) owned by their
// controller the way the real controllers own them, so that mgpu reads a pod's missing annotations from its
// workload exactly as it would in a cluster, and admitted as mgpu's /mutate-memory webhook admits it
// (mgpu-memory written in MiB, stored in `config`'s devices). Every pod starts Pending.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/result.h"
#include "testing/fake_apiserver.h"

namespace mgpu::testing {

// Creates the objects; returns the pods' "namespace/name" keys in manifest order.
Result<std::vector<std::string>> CreateWorkloads(FakeApiServer& api, std::string_view yaml_text,
                                                 const Config& config);

}  // namespace mgpu::testing
