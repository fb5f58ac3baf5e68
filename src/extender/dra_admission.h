// The DRA mode's webhooks (docs/dra.md §7), beside the validating one (admission.h):
// - POST /mutate (a MutatingWebhookConfiguration for pods of namespaces labelled <driver>/dra=enabled): a Pod
//   at CREATE that asks mgpu-core, reclaimed-mgpu-core or mgpu-memory is judged by the rules /validate
//   applies (ParsePodRequest, the controller's annotations included; a refusal is the same sentence), then
//   each GPU container's mgpu limits and requests are replaced by a claim: a ResourceClaimTemplate per shape
//   (dra::TemplateNameFor, created in the pod's namespace when missing; not on a dry run) and a
//   spec.resourceClaims entry "mgpu-<k>" the container's resources.claims names. qos_level, the compute
//   policy and gpu-count are honoured through the claim (dra::ClaimSpecFor). Other pods pass unchanged.
// - POST /mutate-claims (a MutatingWebhookConfiguration for pods of every namespace that hold claims or ask
//   <driver>/gpu, failurePolicy Ignore): a Pod at CREATE without D/dra-limits whose containers hold claims of
//   the driver's classes written by hand (the ResourceClaimTemplate or ResourceClaim each spec.resourceClaims
//   entry names, read from the API server) or ask whole cards through <driver>/gpu gets what /mutate gives
//   its own pods, so that the extender chooses its node: one D/dra-gpu per such container (none when the pod
//   asks <driver>/gpu, which the extender manages itself), D/dra-limits and the annotations
//   dra::LimitsOfClaims derives. Claims that cannot be one mgpu pod are refused with its sentence; a claim
//   that cannot be read is left out (logged). Other pods pass unchanged.
// - POST /validate-claims: a ResourceClaim or ResourceClaimTemplate asking the driver's classes is refused at
//   CREATE (and a template's UPDATE) when its request breaks a rule (dra::CheckClaimSpec), instead of failing
//   its pod at prepare time.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cluster_cache.h"
#include "common/config.h"
#include "common/result.h"
#include "extender/admission.h"

namespace mgpu::extender {

// Creates the ResourceClaimTemplate `claim_template` in `ns` unless one of its name exists there.
using TemplateWriter = std::function<Status(const std::string& ns, const nlohmann::json& claim_template)>;

// What /mutate does to one pod, without I/O: the JSON patch (RFC 6902) and the templates it names.
struct DraRewrite {
  nlohmann::json patch = nlohmann::json::array();
  std::vector<nlohmann::json> templates;
};
DraRewrite RewritePodForDra(const nlohmann::json& pod, const PodRequest& request, const Config& config);

AdmissionReply MutatePodForDra(const std::string& body, const Config& config, const WorkloadLookup& workload,
                               const TemplateWriter& templates);
// The ResourceClaimSpec one spec.resourceClaims entry of a pod in `ns` names (a ResourceClaimTemplate's
// spec.spec, or a ResourceClaim's spec); nullopt when that object does not exist.
using ClaimSpecReader =
    std::function<Result<std::optional<nlohmann::json>>(const std::string& ns, const nlohmann::json& entry)>;
AdmissionReply MutateClaimPodForDra(const std::string& body, const Config& config, const ClaimSpecReader& read);
AdmissionReply ReviewClaimAdmission(const std::string& body, const Config& config);

}  // namespace mgpu::extender
