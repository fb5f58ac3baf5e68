// A pod as every part reads it, read once at the edge where its JSON arrives (the extender's HTTP handlers
// and pod informer, the device plugin's pod informer, kubectl mgpu, mgpu-place): its identity, where it is
// bound, whether it still runs, the containers the kubelet started, the hand-off annotations (DESIGN §5),
// its node-level CPU and memory request and what it asks of GPUs (DESIGN §3, ParsePodRequest). Nothing past
// the edge reads the pod's JSON again. The request needs the annotations of the pod's controlling workload,
// which the caller gives, or a WorkloadSource answers from what it has read (kube::WorkloadResolver). A DRA
// pod's request is read from the limits its D/dra-limits annotation keeps (dra::WithDraLimits).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"
#include "common/request.h"
#include "common/result.h"

namespace mgpu {

struct PodFacts {
  std::string key;  // PodKey
  std::string uid;
  std::string resource_version;
  std::string node;               // spec.nodeName; empty while unbound
  bool finished = false;          // status.phase Succeeded or Failed
  bool deleting = false;          // metadata.deletionTimestamp set
  std::set<std::string> started;  // containers the kubelet has created or run: admitted long ago
  // The kubelet has reported on it (status.hostIP, phase Running, or a container it started). The kubelet
  // writes a pod's status only once it has admitted it, device allocation included (or rejected it: then
  // Failed): the device plugin has matched its containers to devices.
  bool admitted = false;
  std::optional<Assignment> assignment;       // D/gpu-assignment, when present and readable
  std::optional<Assignment> allocated;        // D/gpu-allocated, when present and readable
  int64_t assume_time_ns = 0;                 // D/gpu-assume-time; 0 when absent or unreadable
  std::vector<std::string> problems;          // one sentence per annotation that could not be read
  HostRequest host;                           // HostRequestOf: every pod's, GPU or not
  Result<PodRequest> request = PodRequest{};  // ParsePodRequest's answer
  // Its GPUs come from DRA claims (docs/dra.md §7): the request is that of the mgpu limits the webhook moved
  // into D/dra-limits; its cards are the claims' (counted from the claims, not from this pod).
  bool dra = false;

  // Bound and not finished: it holds what it asked for on its node.
  bool HoldsNode() const { return !node.empty() && !finished; }
};

// Reads `pod` whole. `workload`: the annotations of its controlling workload, or where to find them
// (ParsePodRequest asks only for a pod that has a controller and asks for some mgpu resource).
PodFacts ReadPod(const nlohmann::json& pod, const Config& config, const Annotations& workload = {});
PodFacts ReadPod(const nlohmann::json& pod, const Config& config, WorkloadSource& workload);

}  // namespace mgpu
