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

// How a pod's D/mgpu-memory counts (DESIGN §2). Users write MiB; the kubelet counts the device plugin's
// devices of memoryUnitMiB MiB each. The admission webhook rewrites a pod's amounts from MiB into devices
// at creation (MemoryUnitsPatch) and keeps what was written in D/mgpu-memory-mib, so a stored pod, the one
// every daemon and tool reads, counts devices. An object at admission without that annotation (a pod not yet
// rewritten, a workload's pod template) counts MiB (MemoryCountAtAdmission).
enum class MemoryCount { kDevices, kMiB };
MemoryCount MemoryCountAtAdmission(const nlohmann::json& pod, const Config& config);

// `workload` holds the annotations of the pod's controlling workload (Deployment, StatefulSet, Job); a key
// the pod itself lacks is read from there. A pod that asks for no mgpu resource yields a request with no
// containers. With MemoryCount::kMiB each container's memory per card is rounded up to memoryUnitMiB.
Result<PodRequest> ParsePodRequest(const nlohmann::json& pod, const Config& config,
                                   const Annotations& workload = {},
                                   MemoryCount memory_count = MemoryCount::kDevices);
// The same, with the workload's annotations asked of `workload` when they are read.
Result<PodRequest> ParsePodRequest(const nlohmann::json& pod, const Config& config, WorkloadSource& workload);

// Annotations of a pod's controlling workload, for ParsePodRequest (the admission webhook's lookup).
using WorkloadLookup = std::function<Annotations(const nlohmann::json& pod)>;

// Where a parsed container is in `pod`: its JSON pointer ("/spec/initContainers/0") and the object; a null
// `object` when the pod has no container of that name in that list.
struct PodContainer {
  std::string pointer;
  const nlohmann::json* object = nullptr;
};
PodContainer FindContainer(const nlohmann::json& pod, const ContainerRequest& container);

// The JSON patch (RFC 6902) that rewrites `pod`'s D/mgpu-memory limits and requests into memoryUnitMiB
// devices, as `request` (parsed with MemoryCount::kMiB) holds them, and records the amounts as written in
// D/mgpu-memory-mib ({"container": amount}); empty when the pod asks for no mgpu-memory.
nlohmann::json MemoryUnitsPatch(const nlohmann::json& pod, const PodRequest& request, const Config& config);
// What the /mutate-memory webhook does to `pod` at creation, for it and for the tools that read manifests
// (the demo, mgpu-place): MemoryUnitsPatch of the pod read in MiB; an empty patch when it is rewritten
// already or breaks a rule (left as written, so that its reader refuses it with the rule's sentence).
nlohmann::json MemoryRewriteOf(const nlohmann::json& pod, const Config& config, const Annotations& workload = {});

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
