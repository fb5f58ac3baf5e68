// The per-card capacity rules of DESIGN §4, as pure functions over a node's cards: does a pod fit, on which
// cards, what does placing it do to usage, and how good is the node. No I/O, no locks, no clocks: the
// extender, the device plugin and the trace replay all call these.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "common/fragmentation.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu {

// The allocator's view of a node with nothing allocated yet. A card's memory capacity is its memory less
// `reservedMemoryMiB`, rounded down to `memoryUnitMiB` (what the device plugin advertises).
NodeState MakeNodeState(std::string name, const NodeInventory& inventory, const Config& config);

// Where Place() put a pod on a node, and its working memory: keep one per thread and pass it to every call,
// so that placing a pod on thousands of nodes allocates nothing.
struct Placement {
  std::vector<int> positions;    // chosen card positions (into NodeState::cards), container after container
  std::vector<CardUsage> usage;  // the node's card usage with the pod placed (up to the failing container)
  size_t failed_container = 0;   // when Place() failed: the container that found too few cards
  size_t feasible = 0;           // and how many cards could take it

  struct Candidate {
    double key;  // lower is better
    double free_after;
    int index;
    int position;
  };
  std::vector<Candidate> candidates;
  NodeFree free;
};

// Chooses cards for every GPU container of `pod` by the pod's card policy: binpack takes the feasible cards
// left with the least free capacity, spread the most, fragmentation those that grow the workload's expected
// fragmentation least (binpack while `workload` is null or empty, and for offline pods); ties go to the lower
// card index. Returns whether the pod fits; `out` says where.
bool Place(const NodeState& node, const PodRequest& pod, const WorkloadModel* workload, Placement& out);

// The cards a successful Place() chose, as an Assignment.
Assignment AssignmentOf(const NodeState& node, const PodRequest& pod, const Placement& placed);

// Why a failed Place() found too few cards, as a sentence a person can act on ("no card can take ...: best
// card ... has ..."), worded from `failed` itself: the node is not placed again.
std::string WhyNotPlaced(const NodeState& node, const PodRequest& pod, const Placement& failed);

// Why a failed Place() found too few cards in the words kube-scheduler shows after a count of nodes ("0/9
// nodes are available: 5 no mgpu card free for 20 percent core and 4096 MiB, 4 no mgpu card free for 20
// percent core and 4096 MiB (cards holding another compute policy)"): only what every node failing for the
// same cause shares, so that kube-scheduler adds such nodes up, and no number but the pod's own amounts. In
// brackets, the cause other than free capacity: "larger than any card" when the container asks each card
// for more memory than every card of the node has, "more cards than the node has" when it asks for more
// cards than the node has, else the rule that turned away the most cards.
std::string SchedulerReason(const NodeState& node, const PodRequest& pod, const Placement& failed);

// Place() as an Assignment, or WhyNotPlaced.
Result<Assignment> ChooseCards(const NodeState& node, const PodRequest& pod,
                               const WorkloadModel* workload = nullptr);

// Adds `assignment` to the node's usage. Every share is checked first (known healthy card, the container's
// exact per-card amounts on distinct cards, every rule of §4); on error the node is unchanged.
Status Apply(NodeState& node, const PodRequest& pod, const Assignment& assignment);

// Removes what Apply added; on error (the assignment was not applied) the node is unchanged.
Status Release(NodeState& node, const PodRequest& pod, const Assignment& assignment);

// What placing `pod` where a successful Place() put it costs the node under `policy`; lower is better.
// binpack: minus the node's fullness after placement; spread: the fullness; fragmentation: the growth of the
// workload's expected fragmentation, the fuller node first among equals (binpack while the workload is null
// or empty). Equal costs are told apart by a fixed pseudo-random order of node names far below any other
// difference, so the scheduler's pick is deterministic. Uses `placed`'s working memory.
double PlacementCost(const NodeState& node, const PodRequest& pod, Placement& placed, NodePolicy policy,
                     const WorkloadModel* workload = nullptr);

// kube-scheduler extender scores (0..10) for the costs of the candidate nodes: the lowest cost gets 10, the
// next distinct cost 9, and so on down to 0, so the best node stays strictly best however close the costs
// are.
std::vector<int> ExtenderScores(const std::vector<double>& costs);

// One node's answer for a pod.
struct NodeDecision {
  bool fits = false;
  double cost = 0;     // PlacementCost under the pod's node policy, when it fits
  std::string reason;  // when it does not fit and the reason was asked for: SchedulerReason
  // It fits, but a bind there would wait out an ambiguous pair (DecisionMemo::Decide, when asked).
  bool waits = false;
};

// Whether `pod` fits `node` under `model`, what placing it there costs and, with `with_reason`, why it does
// not fit: all from one Place() pass. `scratch` is working memory (see Placement).
NodeDecision Decide(const NodeState& node, const PodRequest& pod, const WorkloadModel* model,
                    bool with_reason, Placement& scratch);

// The extender's score (ExtenderScores over the costs of the fitting nodes) of each decision, in order; a
// node that does not fit scores 0.
std::vector<int> Scores(const std::vector<NodeDecision>& decisions);

}  // namespace mgpu
