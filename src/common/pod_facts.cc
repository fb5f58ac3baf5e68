#include "common/pod_facts.h"

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "common/dra.h"
#include "common/json_path.h"

namespace mgpu {
namespace {

using nlohmann::json;

// Containers with a containerID, or running or terminated: the kubelet admitted them long ago.
std::set<std::string> StartedContainers(const json& pod) {
  std::set<std::string> out;
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    const json* statuses = FindPath(pod, {"status", list});
    if (!statuses || !statuses->is_array()) continue;
    for (const json& s : *statuses) {
      const bool ran = FindPath(s, {"state", "running"}) || FindPath(s, {"state", "terminated"});
      if (!StringAt(s, {"containerID"}).empty() || ran) out.insert(StringAt(s, {"name"}));
    }
  }
  return out;
}

// ReadPod, the request already parsed.
PodFacts ReadWith(const json& pod, const ResourceNames& names, Result<PodRequest> request) {
  PodFacts out;
  out.request = std::move(request);
  if (!pod.is_object()) return out;
  out.key = PodKey(MetadataString(pod, "namespace"), MetadataString(pod, "name"));
  out.uid = MetadataString(pod, "uid");
  out.resource_version = MetadataString(pod, "resourceVersion");
  out.node = StringAt(pod, {"spec", "nodeName"});
  const std::string phase = StringAt(pod, {"status", "phase"});
  out.finished = phase == "Succeeded" || phase == "Failed";
  out.deleting = !MetadataString(pod, "deletionTimestamp").empty();
  out.started = StartedContainers(pod);
  out.admitted = phase == "Running" || !StringAt(pod, {"status", "hostIP"}).empty() || !out.started.empty();
  // ParsePodRequest has summed it already when the request parses.
  out.host = out.request.ok() ? HostRequest{out.request->cpu_milli, out.request->host_memory_mib}
                              : HostRequestOf(pod);
  const Annotations annotations = AnnotationsOf(pod);
  const auto unreadable = [&](const std::string& name, const std::string& why) {
    out.problems.push_back("pod " + out.key + " has an unreadable " + name + ": " + why);
  };
  const auto read = [&](const std::string& name, std::optional<Assignment>& into) {
    auto it = annotations.find(name);
    if (it == annotations.end()) return;
    Result<Assignment> a = DecodeAssignment(it->second);
    if (a.ok()) {
      into = std::move(*a);
    } else {
      unreadable(name, a.message());
    }
  };
  read(names.gpu_assignment, out.assignment);
  read(names.gpu_allocated, out.allocated);
  if (auto it = annotations.find(names.gpu_assume_time); it != annotations.end()) {
    Result<int64_t> t = DecodeAssumeTime(it->second);
    if (t.ok()) {
      out.assume_time_ns = *t;
    } else {
      unreadable(names.gpu_assume_time, t.message());
    }
  }
  return out;
}

// ReadPod with `parse` reading the request of a pod object: the pod's own, or a DRA pod's as it was written.
template <typename Parse>
PodFacts ReadParsed(const json& pod, const Config& config, Parse parse) {
  const ResourceNames names = config.Names();
  if (!FindPath(pod, {"metadata", "annotations", names.dra_limits.c_str()}))
    return ReadWith(pod, names, parse(pod));
  Result<std::optional<json>> written = dra::WithDraLimits(pod, config);
  if (written.ok() && !*written) return ReadWith(pod, names, parse(pod));  // not a string: not ours
  PodFacts out = ReadWith(pod, names, written.ok() ? parse(**written) : Result<PodRequest>(PodRequest{}));
  out.dra = true;
  if (!written.ok()) {  // its claims still stand: kube-scheduler places it, without mgpu's scores
    out.problems.push_back("pod " + out.key + ": " + written.message());
    out.host = HostRequestOf(pod);
  }
  return out;
}

}  // namespace

PodFacts ReadPod(const json& pod, const Config& config, const Annotations& workload) {
  return ReadParsed(pod, config, [&](const json& p) { return ParsePodRequest(p, config, workload); });
}

PodFacts ReadPod(const json& pod, const Config& config, WorkloadSource& workload) {
  return ReadParsed(pod, config, [&](const json& p) { return ParsePodRequest(p, config, workload); });
}

}  // namespace mgpu
