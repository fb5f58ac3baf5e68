#include "extender/admission.h"

#include <optional>

#include <spdlog/spdlog.h>

#include "common/kube/client.h"
#include "common/request.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;
constexpr char kApiVersion[] = "admission.k8s.io/v1";

const json& At(const json& object, std::initializer_list<const char*> path) {
  static const json kNull;
  const json* at = kube::FindPath(object, path);
  return at ? *at : kNull;
}

// What the rules read of one admitted object: the pod (or pod template, as a pod) and, for a template, the
// annotations its pods' controller will carry (for a Pod they are looked up when judging).
struct Subject {
  json pod;
  std::optional<Annotations> workload;
  std::string kind = "Pod";  // what the refusal names: the pod, or the workload whose pod template it is
};

// The workload kinds whose pod template is judged; a CronJob's is in its jobTemplate, whose annotations its
// Jobs (its pods' controllers) carry.
struct TemplateKind {
  const char* group;
  const char* kind;
  bool in_job_template;
};
constexpr TemplateKind kTemplateKinds[] = {
    {"apps", "Deployment", false}, {"apps", "StatefulSet", false}, {"apps", "ReplicaSet", false},
    {"apps", "DaemonSet", false},  {"batch", "Job", false},        {"batch", "CronJob", true},
};

std::optional<Subject> SubjectOf(const json& object, const std::string& group, const std::string& kind,
                                 const std::string& ns) {
  if (group.empty() && kind == "Pod") {
    json pod = object;
    json& meta = pod["metadata"];
    if (!meta.is_object()) meta = json::object();
    if (kube::MetadataString(pod, "namespace").empty()) meta["namespace"] = ns;
    if (kube::MetadataString(pod, "name").empty()) meta["name"] = kube::MetadataString(pod, "generateName");
    return Subject{std::move(pod), std::nullopt};
  }
  for (const TemplateKind& t : kTemplateKinds) {
    if (group != t.group || kind != t.kind) continue;
    const json& controller = t.in_job_template ? At(object, {"spec", "jobTemplate"}) : object;
    const json& tmpl = At(controller, {"spec", "template"});
    json meta = At(tmpl, {"metadata"}).is_object() ? At(tmpl, {"metadata"}) : json::object();
    meta["namespace"] = ns;
    meta["name"] = kube::MetadataString(object, "name");
    json pod = {{"metadata", std::move(meta)}, {"spec", At(tmpl, {"spec"})}};
    return Subject{std::move(pod), AnnotationsOf(controller), t.kind};
  }
  return std::nullopt;
}

// Whether the rules would read `a` and `b` alike.
bool SameToTheRules(const Subject& a, const Subject& b) {
  return At(a.pod, {"spec"}) == At(b.pod, {"spec"}) &&
         At(a.pod, {"metadata", "annotations"}) == At(b.pod, {"metadata", "annotations"}) &&
         At(a.pod, {"metadata", "ownerReferences"}) == At(b.pod, {"metadata", "ownerReferences"}) &&
         a.workload == b.workload;
}

// The annotations the pod's controller gives it: the template's workload's, else looked up.
Annotations ControllerAnnotations(const Subject& subject, const WorkloadLookup& workload) {
  if (subject.workload) return *subject.workload;
  if (workload && ControllerOf(subject.pod)) return workload(subject.pod);
  return {};
}

std::string Judge(const Subject& subject, const Config& config, const WorkloadLookup& workload) {
  const Annotations controller = ControllerAnnotations(subject, workload);
  Result<PodRequest> request =
      ParsePodRequest(subject.pod, config, controller, MemoryCountAtAdmission(subject.pod, config));
  if (request.ok()) return "";
  // The rules name a pod ("pod ns/name: ..."); a workload's refusal names the workload and its pod template.
  std::string refusal = request.message();
  const std::string pod = "pod " + PodKeyOf(subject.pod);
  if (subject.kind != "Pod" && refusal.rfind(pod, 0) == 0)
    refusal.replace(0, pod.size(), subject.kind + " " + PodKeyOf(subject.pod) + "'s pod template");
  return refusal;
}

AdmissionReply BadRequest(const std::string& sentence) { return {400, sentence + "\n"}; }

std::string EncodeBase64(const std::string& bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (i + 1 < bytes.size() ? static_cast<uint8_t>(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? static_cast<uint8_t>(bytes[i + 2]) : 0);
    out += kDigits[(n >> 18) & 63];
    out += kDigits[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kDigits[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[n & 63] : '=';
  }
  return out;
}

}  // namespace

Result<json> AdmissionRequestOf(const std::string& body, AdmissionReply& bad_request) {
  json review = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) {
    bad_request =
        BadRequest("the request body is not JSON; an admission.k8s.io/v1 AdmissionReview was expected");
    return Error{bad_request.body};
  }
  if (!review.is_object() || review.value("apiVersion", json()) != kApiVersion ||
      review.value("kind", json()) != "AdmissionReview") {
    bad_request =
        BadRequest("the request body is not an admission.k8s.io/v1 AdmissionReview (apiVersion " +
                   At(review, {"apiVersion"}).dump() + ", kind " + At(review, {"kind"}).dump() + ")");
    return Error{bad_request.body};
  }
  const json& uid = At(review, {"request", "uid"});
  if (!uid.is_string() || uid.get<std::string>().empty()) {
    bad_request = BadRequest("the AdmissionReview has no request.uid");
    return Error{bad_request.body};
  }
  return std::move(review["request"]);
}

AdmissionReply AdmissionAnswer(const std::string& uid, int code, const std::string& refusal,
                               const json& patch) {
  json response = {{"uid", uid}, {"allowed", refusal.empty()}};
  if (!refusal.empty()) response["status"] = {{"code", code}, {"message", refusal}};
  if (refusal.empty() && patch.is_array() && !patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = EncodeBase64(patch.dump());
  }
  return {200, json{{"apiVersion", kApiVersion}, {"kind", "AdmissionReview"}, {"response", response}}.dump()};
}

AdmissionReply ReviewAdmission(const std::string& body, const Config& config,
                               const WorkloadLookup& workload) {
  AdmissionReply bad_request;
  Result<json> parsed = AdmissionRequestOf(body, bad_request);
  if (!parsed.ok()) return bad_request;
  const json& request = *parsed;
  const std::string uid = kube::StringAt(request, {"uid"});
  const std::string operation = kube::StringAt(request, {"operation"});
  if (operation != "CREATE" && operation != "UPDATE") return AdmissionAnswer(uid, 200, "");
  const json& object = At(request, {"object"});
  if (!object.is_object())
    return AdmissionAnswer(uid, 400, "the AdmissionReview's request.object is not a JSON object");
  if (!At(object, {"metadata", "deletionTimestamp"}).is_null()) return AdmissionAnswer(uid, 200, "");

  const std::string group = kube::StringAt(request, {"kind", "group"});
  const std::string kind = kube::StringAt(request, {"kind", "kind"});
  std::string ns = kube::StringAt(request, {"namespace"});
  if (ns.empty()) ns = kube::MetadataString(object, "namespace");
  const std::optional<Subject> subject = SubjectOf(object, group, kind, ns);
  if (!subject) return AdmissionAnswer(uid, 200, "");
  if (operation == "UPDATE") {
    const json& old_object = At(request, {"oldObject"});
    std::optional<Subject> old =
        old_object.is_object() ? SubjectOf(old_object, group, kind, ns) : std::nullopt;
    if (old && SameToTheRules(*old, *subject)) return AdmissionAnswer(uid, 200, "");
  }
  return AdmissionAnswer(uid, 403, Judge(*subject, config, workload));
}

CreatedPod PodAtCreate(const std::string& body) {
  CreatedPod out;
  AdmissionReply bad_request;
  Result<json> parsed = AdmissionRequestOf(body, bad_request);
  if (!parsed.ok()) {
    out.answer = bad_request;
    return out;
  }
  out.request = std::move(*parsed);
  const json& request = out.request;
  out.uid = kube::StringAt(request, {"uid"});
  const json& object = At(request, {"object"});
  if (kube::StringAt(request, {"operation"}) != "CREATE" || kube::StringAt(request, {"kind", "kind"}) != "Pod" ||
      !kube::StringAt(request, {"kind", "group"}).empty()) {
    out.answer = AdmissionAnswer(out.uid, 200, "");
  } else if (!object.is_object()) {
    out.answer = AdmissionAnswer(out.uid, 400, "the AdmissionReview's request.object is not a JSON object");
  } else {
    out.pod = object;
    if (kube::MetadataString(out.pod, "namespace").empty())
      out.pod["metadata"]["namespace"] = kube::StringAt(request, {"namespace"});
    if (kube::MetadataString(out.pod, "name").empty())
      out.pod["metadata"]["name"] = kube::MetadataString(out.pod, "generateName");
  }
  return out;
}

AdmissionReply MutatePodMemory(const std::string& body, const Config& config, const WorkloadLookup& workload) {
  const CreatedPod created = PodAtCreate(body);
  if (created.answer) return *created.answer;
  const std::optional<Subject> subject =
      SubjectOf(created.pod, "", "Pod", kube::MetadataString(created.pod, "namespace"));
  // A pod that breaks a rule gets no patch: /validate refuses it, in the same words.
  const json patch = MemoryRewriteOf(subject->pod, config, ControllerAnnotations(*subject, workload));
  if (!patch.empty())
    spdlog::info("pod={} mgpu-memory rewritten from MiB into {} MiB devices", PodKeyOf(subject->pod),
                 config.memory_unit_mib);
  return AdmissionAnswer(created.uid, 200, "", patch);
}

}  // namespace mgpu::extender
