// kubectl-mgpu, the kubectl plugin (`kubectl mgpu ...`, found on PATH): per-node, per-card GPU allocation
// read from the API server with the user's kubeconfig. Usage is derived exactly as the extender derives it:
// the listed nodes and pods go through the extender's own ClusterCache (common/cluster_cache.h: gpu-allocated
// over gpu-assignment, terminated pods release, an assignment never allocated stops counting after the TTL),
// and why runs the extender's filter (FilterPod), so what this shows is what the extender sees. It links
// common alone, not the extender.
//   kubectl mgpu nodes [NODE...] [-o table|json] [--kubeconfig FILE] [--context NAME] [--config FILE]
//                      [--resource-domain D]
//   kubectl mgpu pods [NODE...] [-n NAMESPACE] [-o table|json] [...]: one row per piece of a card a pod holds
//                      (from gpu-allocated, else gpu-assignment), with the pod's GPU share for billing
//   kubectl mgpu why [NAMESPACE/]POD [-n NAMESPACE] [--extender URL [--extender-ca FILE |
//                      --insecure-skip-tls-verify]]: the extender filter's answer and reason for every node,
//                      computed here over the same cache, or asked of a running extender's /filter (its live
//                      cache); when no node fits, the cause (common/cluster_defrag.h's Diagnose): no node could
//                      hold the pod even with no other pod on it (larger than any card, ...), the free
//                      capacity is short, or fragmentation
//   kubectl mgpu defrag --dry-run [NAMESPACE/]POD [-n NAMESPACE]: for a pod that fragmentation keeps off
//                      every node, the plan of common/cluster_defrag.h: which offline pods to move where so
//                      that it fits; mgpu moves nothing itself
// The pod of why and defrag: NAMESPACE/NAME as the tables print it, or NAME in -n's namespace, else in the
// kubeconfig context's (as kubectl).
// Exit codes: 0 shown; 1 the API server (or the extender) could not be read; 2 usage; 3 kubeconfig or config
// unreadable; 4 no mgpu node (or a named node is not one).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "common/cluster_cache.h"

namespace mgpu::cli {

inline constexpr int kExitApi = 1;
inline constexpr int kExitNoNodes = 4;

// Runs the plugin with its arguments (those after `kubectl mgpu`); returns the exit code.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// One row per card (node, index, model, health, online core used/100, reclaimed core used/100, memory
// used/capacity in MiB, the pods on it; pods assigned but not yet allocated by the kubelet are marked), and
// one row for a node whose inventory cannot be used, saying why.
std::string NodesTable(const std::vector<const NodeView*>& nodes);

}  // namespace mgpu::cli
