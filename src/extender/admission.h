// The validating admission webhook (POST /validate): an admission.k8s.io/v1 AdmissionReview in, one out. A
// Pod, or the pod template of a Deployment, StatefulSet, Job, ReplicaSet, DaemonSet or CronJob, that breaks
// a DESIGN §3 rule is refused at creation with the sentence the filter would give later (ParsePodRequest's),
// so `kubectl apply` shows it instead of a pod that sits Pending. What the webhook judges:
// - a template is read as a pod named after its workload, in the request's namespace, whose workload
//   annotations are the workload's own (a CronJob's: its jobTemplate's, which its Jobs carry);
// - a Pod is read with its controller's annotations (`workload`, as the filter reads them);
// - an UPDATE is judged only when the pod template or the workload's annotations changed, so an object
//   created before the webhook (or under another config) can still be labelled, scaled or finalised;
// - DELETE and CONNECT, other kinds and objects being deleted are allowed.
// A body that is not an AdmissionReview with a request.uid is answered 400 with one sentence (the API
// server then applies the webhook's failurePolicy); an unreadable request.object is refused with code 400.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cluster_cache.h"
#include "common/config.h"

namespace mgpu::extender {

struct AdmissionReply {
  int status = 200;  // HTTP status
  std::string body;  // an AdmissionReview (200) or a plain sentence (400)
};

AdmissionReply ReviewAdmission(const std::string& body, const Config& config, const WorkloadLookup& workload);

// The mutating webhook (POST /mutate-memory): a Pod at CREATE whose D/mgpu-memory is written in MiB (no
// D/mgpu-memory-mib yet) is read as /validate reads it, amounts in MiB, and allowed with the patch that
// rewrites them into memoryUnitMiB devices (MemoryUnitsPatch). A pod that breaks a rule passes unchanged:
// /validate, which runs after every mutation, refuses it with the rule's sentence (and one that opted out of
// validation is refused by the extender's filter in the same words). Other objects pass unchanged.
AdmissionReply MutatePodMemory(const std::string& body, const Config& config, const WorkloadLookup& workload);

// The AdmissionReview envelope, shared with the DRA webhooks (dra_admission.h): the request of a body that is
// an admission.k8s.io/v1 AdmissionReview with a request.uid, or the 400 reply saying why not; and the reply
// to one (`refusal` empty: allowed, with a JSON patch when `patch` is an array of operations).
Result<nlohmann::json> AdmissionRequestOf(const std::string& body, AdmissionReply& bad_request);
AdmissionReply AdmissionAnswer(const std::string& uid, int code, const std::string& refusal,
                               const nlohmann::json& patch = nullptr);

// A Pod at CREATE in an AdmissionReview `body`, its namespace (and its name, from generateName) filled in
// from the request; or, in `answer`, the reply to give at once (a bad request, or anything else allowed).
struct CreatedPod {
  std::optional<AdmissionReply> answer;
  std::string uid;
  nlohmann::json request;
  nlohmann::json pod;
};
CreatedPod PodAtCreate(const std::string& body);

}  // namespace mgpu::extender
