#include "extender/dra_admission.h"

#include <spdlog/spdlog.h>

#include "common/dra.h"
#include "common/json_path.h"
#include "common/request.h"

namespace mgpu::extender {

using nlohmann::json;

DraRewrite RewritePodForDra(const json& pod, const PodRequest& request, const Config& config) {
  DraRewrite out;
  const ResourceNames names = config.Names();
  const json* spec = FindPath(pod, {"spec"});
  const bool has_claims = spec && spec->contains("resourceClaims") && (*spec)["resourceClaims"].is_array();
  if (!has_claims)
    out.patch.push_back({{"op", "add"}, {"path", "/spec/resourceClaims"}, {"value", json::array()}});
  int k = 0;
  for (const ContainerRequest& c : request.containers) {
    const PodContainer at = FindContainer(pod, c);
    if (at.object == nullptr) continue;
    const json& container = *at.object;
    const std::string claim = "mgpu-" + std::to_string(k++);
    const std::string name = dra::TemplateNameFor(request, c, config);
    out.templates.push_back({{"apiVersion", "resource.k8s.io/v1"},
                             {"kind", "ResourceClaimTemplate"},
                             {"metadata", {{"name", name}, {"namespace", request.namespace_name}}},
                             {"spec", {{"spec", dra::ClaimSpecFor(request, c, config)}}}});
    out.patch.push_back({{"op", "add"},
                         {"path", "/spec/resourceClaims/-"},
                         {"value", {{"name", claim}, {"resourceClaimTemplateName", name}}}});
    const std::string base = at.pointer + "/resources";
    for (const char* kind : {"limits", "requests"}) {
      const json* amounts = FindPath(container, {"resources", kind});
      if (amounts == nullptr || !amounts->is_object()) continue;
      for (const std::string& r : {names.core, names.reclaimed_core, names.memory}) {
        if (amounts->contains(r))
          out.patch.push_back({{"op", "remove"}, {"path", base + "/" + kind + "/" + PointerToken(r)}});
      }
    }
    // One D/dra-gpu: kube-scheduler calls the extender for the pod (no node has it; the scheduler and the
    // kubelet ignore it).
    const json* limits = FindPath(container, {"resources", "limits"});
    if (limits == nullptr || !limits->is_object())
      out.patch.push_back({{"op", "add"}, {"path", base + "/limits"}, {"value", json::object()}});
    out.patch.push_back(
        {{"op", "add"}, {"path", base + "/limits/" + PointerToken(names.dra_resource)}, {"value", "1"}});
    const json* claims = FindPath(container, {"resources", "claims"});
    if (claims == nullptr || !claims->is_array())
      out.patch.push_back({{"op", "add"}, {"path", base + "/claims"}, {"value", json::array()}});
    out.patch.push_back({{"op", "add"}, {"path", base + "/claims/-"}, {"value", {{"name", claim}}}});
  }
  // The limits it had, for the extender to read the pod's request as it was written (dra::WithDraLimits).
  if (!FindPath(pod, {"metadata", "annotations"}))
    out.patch.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
  out.patch.push_back({{"op", "add"},
                       {"path", "/metadata/annotations/" + PointerToken(names.dra_limits)},
                       {"value", dra::DraLimitsOf(pod, request, config).dump()}});
  return out;
}

AdmissionReply MutatePodForDra(const std::string& body, const Config& config, const WorkloadLookup& workload,
                               const TemplateWriter& templates) {
  AdmissionReply bad_request;
  Result<json> parsed = AdmissionRequestOf(body, bad_request);
  if (!parsed.ok()) return bad_request;
  const json& request = *parsed;
  const std::string uid = StringAt(request, {"uid"});
  if (StringAt(request, {"operation"}) != "CREATE" || StringAt(request, {"kind", "kind"}) != "Pod" ||
      !StringAt(request, {"kind", "group"}).empty())
    return AdmissionAnswer(uid, 200, "");
  const json* object = FindPath(request, {"object"});
  if (object == nullptr || !object->is_object())
    return AdmissionAnswer(uid, 400, "the AdmissionReview's request.object is not a JSON object");
  json pod = *object;
  if (MetadataString(pod, "namespace").empty())
    pod["metadata"]["namespace"] = StringAt(request, {"namespace"});
  if (MetadataString(pod, "name").empty()) pod["metadata"]["name"] = MetadataString(pod, "generateName");
  Annotations controller;
  if (workload && ControllerOf(pod)) controller = workload(pod);
  Result<PodRequest> asked = ParsePodRequest(pod, config, controller, MemoryCountAtAdmission(pod, config));
  if (!asked.ok()) return AdmissionAnswer(uid, 403, asked.message());
  if (!asked->AsksForGpu()) return AdmissionAnswer(uid, 200, "");
  DraRewrite rewrite = RewritePodForDra(pod, *asked, config);
  const json* dry_run = FindPath(request, {"dryRun"});
  if (!(dry_run && dry_run->is_boolean() && dry_run->get<bool>())) {
    for (const json& t : rewrite.templates) {
      if (Status s = templates ? templates(asked->namespace_name, t) : Status(Error{"no API client"});
          !s.ok()) {
        return AdmissionAnswer(uid, 500,
                               "pod " + asked->Key() + ": cannot create ResourceClaimTemplate " +
                                   MetadataString(t, "name") + ": " + s.message());
      }
    }
  }
  spdlog::info("pod={} rewritten into {} DRA claims", asked->Key(), rewrite.templates.size());
  return AdmissionAnswer(uid, 200, "", rewrite.patch);
}

AdmissionReply ReviewClaimAdmission(const std::string& body, const Config& config) {
  AdmissionReply bad_request;
  Result<json> parsed = AdmissionRequestOf(body, bad_request);
  if (!parsed.ok()) return bad_request;
  const json& request = *parsed;
  const std::string uid = StringAt(request, {"uid"});
  const std::string operation = StringAt(request, {"operation"});
  const std::string kind = StringAt(request, {"kind", "kind"});
  if (operation != "CREATE" && operation != "UPDATE") return AdmissionAnswer(uid, 200, "");
  const json* object = FindPath(request, {"object"});
  if (object == nullptr || !object->is_object())
    return AdmissionAnswer(uid, 400, "the AdmissionReview's request.object is not a JSON object");
  std::string ns = StringAt(request, {"namespace"});
  const std::string what = kind + " " + ns + "/" + MetadataString(*object, "name");
  const json* spec = nullptr;
  if (kind == "ResourceClaim" && operation == "CREATE") {
    spec = FindPath(*object, {"spec"});  // a claim's spec is immutable; its status changes are not ours
  } else if (kind == "ResourceClaimTemplate") {
    spec = FindPath(*object, {"spec", "spec"});
  }
  if (spec == nullptr) return AdmissionAnswer(uid, 200, "");
  Status s = dra::CheckClaimSpec(*spec, config, what);
  return AdmissionAnswer(uid, 403, s.ok() ? "" : s.message());
}

}  // namespace mgpu::extender
