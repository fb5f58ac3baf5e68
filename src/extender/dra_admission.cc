#include "extender/dra_admission.h"

#include <spdlog/spdlog.h>

#include "common/dra.h"
#include "common/json_path.h"
#include "common/request.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;

// Adds one D/dra-gpu to the limits of `container` (its resources at `base`): kube-scheduler then calls the
// extender for the pod (no node has it; the scheduler and the kubelet ignore it).
void AddDraGpu(json& patch, const json& container, const std::string& base, const ResourceNames& names) {
  const json* limits = FindPath(container, {"resources", "limits"});
  if (FindPath(container, {"resources"}) == nullptr)
    patch.push_back({{"op", "add"}, {"path", base}, {"value", json::object()}});
  if (limits == nullptr || !limits->is_object())
    patch.push_back({{"op", "add"}, {"path", base + "/limits"}, {"value", json::object()}});
  patch.push_back({{"op", "add"}, {"path", base + "/limits/" + PointerToken(names.dra_resource)}, {"value", "1"}});
}

// Sets the pod's annotations `values` (replacing those it has).
void AddAnnotations(json& patch, const json& pod, const Annotations& values) {
  if (!FindPath(pod, {"metadata", "annotations"}))
    patch.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
  for (const auto& [key, value] : values)
    patch.push_back({{"op", "add"}, {"path", "/metadata/annotations/" + PointerToken(key)}, {"value", value}});
}

// Gives the pod dra.schedulerName's profile, when it names the default one (or none): other schedulers and
// profiles are the pod's own choice.
void SetSchedulerName(json& patch, const json& pod, const Config& config) {
  if (config.dra.scheduler_name.empty()) return;
  const json* name = FindPath(pod, {"spec", "schedulerName"});
  if (name && !(name->is_string() && name->get<std::string>() == "default-scheduler")) return;
  patch.push_back({{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", config.dra.scheduler_name}});
}

}  // namespace

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
    AddDraGpu(out.patch, container, base, names);
    const json* claims = FindPath(container, {"resources", "claims"});
    if (claims == nullptr || !claims->is_array())
      out.patch.push_back({{"op", "add"}, {"path", base + "/claims"}, {"value", json::array()}});
    out.patch.push_back({{"op", "add"}, {"path", base + "/claims/-"}, {"value", {{"name", claim}}}});
  }
  // The limits it had, for the extender to read the pod's request as it was written (dra::WithDraLimits).
  AddAnnotations(out.patch, pod, {{names.dra_limits, dra::DraLimitsOf(pod, request, config).dump()}});
  SetSchedulerName(out.patch, pod, config);
  return out;
}

AdmissionReply MutatePodForDra(const std::string& body, const Config& config, const WorkloadLookup& workload,
                               const TemplateWriter& templates) {
  CreatedPod created = PodAtCreate(body);
  if (created.answer) return *created.answer;
  const std::string& uid = created.uid;
  const json& request = created.request;
  const json& pod = created.pod;
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

AdmissionReply MutateClaimPodForDra(const std::string& body, const Config& config, const ClaimSpecReader& read) {
  CreatedPod created = PodAtCreate(body);
  if (created.answer) return *created.answer;
  const std::string& uid = created.uid;
  const json& pod = created.pod;
  const ResourceNames names = config.Names();
  if (FindPath(pod, {"metadata", "annotations", names.dra_limits.c_str()})) return AdmissionAnswer(uid, 200, "");
  const std::string ns = MetadataString(pod, "namespace");
  std::map<std::string, json> specs;
  const json* entries = FindPath(pod, {"spec", "resourceClaims"});
  for (const json& entry : entries && entries->is_array() ? *entries : json::array()) {
    Result<std::optional<json>> spec = read ? read(ns, entry) : Result<std::optional<json>>(Error{"no API client"});
    if (spec.ok() && *spec) {
      specs[StringAt(entry, {"name"})] = std::move(**spec);
    } else if (!spec.ok()) {
      spdlog::warn("pod={}/{} claim {} not read, not counted: {}", ns, MetadataString(pod, "name"),
                   StringAt(entry, {"name"}), spec.message());
    }
  }
  Result<std::optional<dra::ClaimsAsLimits>> asked = dra::LimitsOfClaims(pod, specs, config);
  if (!asked.ok()) return AdmissionAnswer(uid, 403, asked.message());
  if (!*asked) return AdmissionAnswer(uid, 200, "");
  json patch = json::array();
  for (const char* list : {"initContainers", "containers"}) {
    if ((*asked)->extended_resource) break;  // <driver>/gpu brings the extender
    const json* containers = FindPath(pod, {"spec", list});
    for (size_t i = 0; containers && containers->is_array() && i < containers->size(); ++i) {
      if ((*asked)->limits.count(StringAt((*containers)[i], {"name"})))
        AddDraGpu(patch, (*containers)[i], "/spec/" + std::string(list) + "/" + std::to_string(i) + "/resources",
                  names);
    }
  }
  Annotations annotations = std::move((*asked)->annotations);
  annotations[names.dra_limits] = json((*asked)->limits).dump();
  AddAnnotations(patch, pod, annotations);
  SetSchedulerName(patch, pod, config);
  spdlog::info("pod={}/{} {} of {}: scored by the extender", ns, MetadataString(pod, "name"),
               (*asked)->extended_resource ? "asks whole cards" : "holds claims", dra::DriverName(config));
  return AdmissionAnswer(uid, 200, "", patch);
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
