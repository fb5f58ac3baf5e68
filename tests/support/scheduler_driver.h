// A stand-in for kube-scheduler configured with the mgpu extender as deploy/ configures it
// (nodeCacheCapable: true; filter, prioritize and bind verbs; the three resources managed), for the demo and
// the end-to-end tests. One scheduling cycle per pod, with kube-scheduler v1.32's JSON (see
// tests/fixtures/kube-scheduler): POST <url>/filter {"Pod", "Nodes": null, "NodeNames"}; POST
// <url>/prioritize with the nodes that passed when more than one did, the highest score winning (ties: the
// first by name, where kube-scheduler draws one at random); POST <url>/bind {"PodName", "PodNamespace",
// "PodUID", "Node"}, the extender creating the Binding. A pod that fits nowhere gets kube-scheduler's message
// ("0/2 nodes are available: 1 <reason>, 1 <reason>.") on a FailedScheduling Event and its PodScheduled
// condition. A pod asking for no managed resource is bound without the extender, as kube-scheduler would.
// Not modelled: kube-scheduler's own filters and scores (node resources, affinity, taints) and preemption.
// What it still exists for, now that tests/realcluster/ and bench/realcluster_bind.sh run the real
// kube-scheduler v1.36.2 with deploy/'s configuration: the demo (scripts/run.sh) and the fake-cluster
// end-to-end tests run without the Kubernetes binaries, step by step (SchedulePending returns each pod's
// outcome at once instead of polling), and bench/bind_throughput.cc drives the extender without a real
// scheduler's own cost (RESULTS section 5 compares the two).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/kube/client.h"

namespace mgpu::testing {

struct SchedulingOutcome {
  std::string node;     // where the pod was bound; empty when it was not
  std::string message;  // why not: the unschedulable message, or the extender's or the bind's error
  bool retry = false;   // an extender or bind error, which kube-scheduler retries soon (not "fits nowhere")
};

class SchedulerDriver {
 public:
  // `extender_url` is the extender's urlPrefix ("http://127.0.0.1:12345"); `managed` its managedResources.
  SchedulerDriver(kube::Client& client, std::string extender_url, std::vector<std::string> managed);

  // One scheduling cycle of `pod` (as the API server holds it) over the schedulable nodes.
  SchedulingOutcome Schedule(const nlohmann::json& pod);

  // Schedules every pod waiting for a node (no spec.nodeName, phase Pending), first come first served, in
  // rounds: while a round binds something, or (a few rounds at most) while an extender or bind error is to be
  // retried, as kube-scheduler retries it. Returns the last outcome of each pod, by "namespace/name".
  std::map<std::string, SchedulingOutcome> SchedulePending();

 private:
  // POSTs `body` to <url>/<verb>; the parsed reply, or an error sentence.
  Result<nlohmann::json> Post(const std::string& verb, const std::string& body);
  void ReportUnschedulable(const nlohmann::json& pod, const std::string& message);

  kube::Client& client_;
  const std::string url_;
  const std::vector<std::string> managed_;
};

}  // namespace mgpu::testing
