// Pods from Kubernetes manifests, for the demo and tools: a Pod stands for itself; a Deployment, ReplicaSet,
// StatefulSet or Job stands for `replicas` (or `parallelism`) pods made from its template, each remembering
// the workload's annotations (where mgpu reads a pod's missing annotations from, DESIGN §3). Also the sample
// nodes the demo and tools place them on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/model.h"
#include "common/request.h"
#include "common/result.h"

namespace mgpu {

struct ManifestPod {
  nlohmann::json pod;    // a v1.Pod: metadata.{name,namespace,annotations,labels} and spec
  Annotations workload;  // the controlling workload's annotations (empty for a bare Pod)
  nlohmann::json owner;  // the workload document the pod is made from (null for a bare Pod)
};

// Every pod the YAML stream's documents stand for; kinds that make no pods are skipped.
Result<std::vector<ManifestPod>> PodsOfManifests(std::string_view yaml_text);

// A sample node: its name and the D/gpu-inventory its device plugin would publish.
struct SampleNode {
  std::string name;
  NodeInventory inventory;
};

// A YAML list of {name, inventory} (inventory: the D/gpu-inventory object), as deploy/examples/nodes.yaml.
Result<std::vector<SampleNode>> SampleNodesOf(std::string_view yaml_text);

}  // namespace mgpu
