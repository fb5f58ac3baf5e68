#include "common/pod_facts.h"

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "common/json_path.h"
#include "common/request.h"

namespace mgpu {
PodFacts ReadPodFacts(const nlohmann::json& pod, const Config& config) {
  PodFacts out;
  if (!pod.is_object()) return out;
  const ResourceNames names = config.Names();
  out.key = PodKeyOf(pod);
  out.uid = MetadataString(pod, "uid");
  out.resource_version = MetadataString(pod, "resourceVersion");
  out.node = StringAt(pod, {"spec", "nodeName"});
  const std::string phase = StringAt(pod, {"status", "phase"});
  out.finished = phase == "Succeeded" || phase == "Failed";
  out.deleting = !MetadataString(pod, "deletionTimestamp").empty();
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

}  // namespace mgpu
