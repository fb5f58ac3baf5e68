// Reading what a pod asks for (DESIGN §3): a v1.Pod as JSON (as kube-scheduler or the API server sends it)
// in, a validated PodRequest out, or one sentence naming the pod, container, field and broken rule.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu {

using Annotations = std::map<std::string, std::string, std::less<>>;

// `workload` holds the annotations of the pod's controlling workload (Deployment, StatefulSet, Job); a key
// the pod itself lacks is read from there. A pod that asks for no mgpu resource yields a request with no
// containers.
Result<PodRequest> ParsePodRequest(const nlohmann::json& pod, const Config& config,
                                   const Annotations& workload = {});

// The metadata.annotations of any object; non-string values are skipped.
Annotations AnnotationsOf(const nlohmann::json& object);

struct OwnerRef {
  std::string api_version;
  std::string kind;
  std::string name;
};

// The ownerReference with controller: true, if any.
std::optional<OwnerRef> ControllerOf(const nlohmann::json& object);

}  // namespace mgpu
