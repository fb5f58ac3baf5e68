// Reading what a pod asks for (DESIGN §3): a v1.Pod as JSON (as kube-scheduler or the API server sends it)
// in, a validated PodRequest out, or one sentence naming the pod, container, field and broken rule.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu {

using Annotations = std::map<std::string, std::string, std::less<>>;

struct OwnerRef {
  std::string api_version;
  std::string kind;
  std::string name;
};

// Where ParsePodRequest finds the annotations of a pod's controlling workload (kube::WorkloadResolver): asked
// at most once per pod, and only for a pod that has a controller and asks for some mgpu resource.
class WorkloadSource {
 public:
  // `ns` and `pod` name the pod (for log lines); `owner` is its controller.
  virtual Annotations AnnotationsOf(const std::string& ns, const std::string& pod, const OwnerRef& owner) = 0;

 protected:
  ~WorkloadSource() = default;
};

// `workload` holds the annotations of the pod's controlling workload (Deployment, StatefulSet, Job); a key
// the pod itself lacks is read from there. A pod that asks for no mgpu resource yields a request with no
// containers.
Result<PodRequest> ParsePodRequest(const nlohmann::json& pod, const Config& config,
                                   const Annotations& workload = {});
// The same, with the workload's annotations asked of `workload` when they are read.
Result<PodRequest> ParsePodRequest(const nlohmann::json& pod, const Config& config, WorkloadSource& workload);

// Annotations of a pod's controlling workload, for ParsePodRequest (the admission webhook's lookup).
using WorkloadLookup = std::function<Annotations(const nlohmann::json& pod)>;

// What kube-scheduler counts a pod as requesting of its node's CPU and memory (the effective request:
// containers and sidecars summed, a larger init container instead, plus the overhead); requests, else
// limits; an unreadable quantity counts 0.
struct HostRequest {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const HostRequest&) const = default;
};
HostRequest HostRequestOf(const nlohmann::json& pod);

// The values of node label `label` (D/gpu.product) that the pod's nodeSelector and required node affinity
// (In expressions) allow, sorted; empty when they allow any.
std::vector<std::string> GpuModelsOf(const nlohmann::json& pod, const std::string& label);

// Reduces `pod` in place to the fields ParsePodRequest, HostRequestOf, GpuModelsOf and ControllerOf read,
// plus what identifies it (name, namespace, uid, resourceVersion, deletionTimestamp, nodeName, phase) and
// status.hostIP (the kubelet has admitted it, PodFacts::admitted):
// annotations of D and the QoS key only (not, say, kubectl's last-applied copy), containers' names,
// resources and restartPolicy. What a cache of many pods keeps.
void KeepSchedulingFields(nlohmann::json& pod, const Config& config);

// The metadata.annotations of any object; non-string values are skipped.
Annotations AnnotationsOf(const nlohmann::json& object);
// PodKey of a pod object's metadata.
std::string PodKeyOf(const nlohmann::json& pod);

// The ownerReference with controller: true, if any.
std::optional<OwnerRef> ControllerOf(const nlohmann::json& object);

}  // namespace mgpu
