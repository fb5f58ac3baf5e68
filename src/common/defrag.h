// Defragmentation plans. A pod that fits no node although the free capacity of the nodes it may use would
// hold it, and one of them would with no other pod on it, is stopped by fragmentation: the free core, card
// memory and CPU are there, but on the wrong cards and nodes. Offline (reclaimed_cores) pods soak up idle capacity and tolerate a restart, so they may be
// moved: a plan names which of them to move where so that the pod fits one node, moving as few as it can.
// mgpu moves nothing itself; kubectl mgpu defrag --dry-run prints the plan, the extender's /metrics counts
// the pods fragmentation stops (FreeCapacityShortfall: planning costs milliseconds at 1,000 nodes, too much
// for a filter), and the trace replay measures what carrying plans out wins (bench/RESULTS.md). Pure: no I/O, no clocks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/fragmentation.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu {

// Whether `node` admits `pod` before its cards are asked: the pod's GPU models allow the node's product, and
// the node's free CPU and memory (where known) cover the pod's requests. Place() says whether the cards do.
bool HostAdmits(const NodeState& node, const PodRequest& pod);

// What the free capacity of the nodes `pod` may use (HostAdmits' model rule), summed over them, lacks for the
// pod, as a sentence: free online core on cards that take pods (reclaimed core for an offline pod), card
// memory, and CPU and host memory where every such node states them. Empty when the sums cover the pod: if
// no node fits it then, fragmentation is what stops it.
std::string FreeCapacityShortfall(const std::vector<const NodeState*>& nodes, const PodRequest& pod);

// Why no node of `nodes` that `pod` may use (HostAdmits' model rule) could hold it even with no pod on it,
// as a sentence: in the nodes' own reasons (SchedulerReason over their cards emptied: "... (larger than any
// card)", "... (more cards than the node has)", "... (cards unhealthy)"), or that no node has a GPU model
// it may use. Empty when one could: then moving pods could make room. The nodes' CPU and memory do not
// count (only what is left free of them is known here).
std::string NoNodeCouldHold(const std::vector<const NodeState*>& nodes, const PodRequest& pod);

// A pod a plan may move (an offline pod) and what it holds where.
struct MovablePod {
  std::string key;        // namespace/name
  size_t node = 0;        // index into the plan's nodes
  PodRequest request;     // its cpu_milli and host_memory_mib count on the node as its cards do
  Assignment assignment;  // its cards there
};

struct DefragMove {
  std::string pod;          // its key
  size_t from = 0, to = 0;  // node indexes (to may equal from: other cards of the same node)
  Assignment cards;         // its cards on `to`
};

struct DefragPlan {
  size_t node = 0;                // where the pod fits once the moves are made
  Assignment cards;               // its cards there
  std::vector<DefragMove> moves;  // made first, in this order; empty when the pod fits already
};

// The plan that lets `pod` fit by moving the fewest of `movable`, then the least GPU share of them: every
// node the pod may use is tried with the movable pods on it taken off, those that can stay put back one by
// one (the smallest first), and the rest moved, the hardest to place first, each to the node its own policy
// then prefers (Decide under `model`; the pod's cards taken first). A pod that fits a node already gets an
// empty plan there. Fails with the reason when no plan exists.
Result<DefragPlan> PlanDefrag(const std::vector<const NodeState*>& nodes,
                              const std::vector<MovablePod>& movable, const PodRequest& pod,
                              const WorkloadModel* model);

}  // namespace mgpu
