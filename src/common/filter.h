// The filter every side runs (the extender's filter verb, kubectl mgpu why): a pod's verdict on each of
// kube-scheduler's candidate nodes, in the words kube-scheduler shows, decided through the decision memo.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/cluster_cache.h"
#include "common/config.h"
#include "common/decision_memo.h"
#include "common/model.h"
#include "common/result.h"
#include "common/scheduler.h"

namespace mgpu {

// The filter's answer for a pod over kube-scheduler's candidate nodes. The reasons are in the words
// kube-scheduler shows after a count of nodes ("0/3 nodes are available: 2 <reason>, 1 <reason>."): nodes
// failing for the same cause get the same reason, and no reason names its node.
struct FilterVerdicts {
  std::vector<size_t> passed;                       // indexes into the candidate names
  std::map<std::string, std::string> failed;        // node -> why the pod does not fit there now
  std::map<std::string, std::string> unresolvable;  // node -> why it fits nowhere (its request is invalid)
  // Failed nodes by cause: no D/gpu-inventory, a bad one, too little free capacity.
  uint64_t no_inventory = 0, bad_inventory = 0, insufficient = 0;
};

// The filter every side runs (the extender's verb, kubectl mgpu why): a pod whose request does not parse is
// unresolvable everywhere, a pod asking for no GPU passes everywhere, and a GPU pod is learned into `model`
// and decided on every usable node through `memo`, failing nodes carrying their reason (a DRA node fails
// every pod that comes this way: DRA pods are the extender's to pass, Extender::Filter).
FilterVerdicts FilterPod(const ClusterView& view, const std::vector<std::string>& names,
                         const Result<PodRequest>& pod, ModelPublisher& model, DecisionMemo& memo,
                         const Config& config);

}  // namespace mgpu
