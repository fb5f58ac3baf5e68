// kube-scheduler's extender JSON contract (DESIGN §8) at the edge: request bodies in, reply bodies out. Keys
// are matched in any case. The pod a request carries is handed to a PodReader (the extender's: ReadPod, once
// per uid and resourceVersion), so the arguments hold its facts, not its JSON. In full-`Nodes` mode only each
// node's metadata.name is read (by simdjson on demand, no DOM); the node objects themselves are passed back
// byte for byte in the filter reply.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/filter.h"
#include "common/pod_facts.h"
#include "common/result.h"

namespace mgpu::extender {

// The most nodes one filter or prioritize call may name (Kubernetes supports clusters of 5,000 nodes).
inline constexpr size_t kMaxNodeNames = 65536;

// Reads the pod object of a request (a JSON object) into the facts the verbs take.
using PodReader = std::function<std::shared_ptr<const PodFacts>(const nlohmann::json& pod)>;

// ExtenderArgs of filter and prioritize.
struct ExtenderArgs {
  std::shared_ptr<const PodFacts> pod;
  std::vector<std::string> node_names;
  bool full_nodes = false;                   // the scheduler sent `Nodes` (nodeCacheCapable: false)
  std::vector<std::string_view> node_items;  // full mode: each node's JSON text, parallel to node_names

  // Fails (one sentence) on malformed JSON, wrong types, or more than kMaxNodeNames nodes.
  static Result<ExtenderArgs> Parse(std::string_view body, const PodReader& read);

 private:
  std::shared_ptr<std::string> buffer_;  // the padded body node_items point into
};

// The filter's verdicts (passed: indexes into ExtenderArgs::node_names), or an error for the whole request.
struct FilterResult : FilterVerdicts {
  std::string error;
};
std::string EncodeFilterResult(const ExtenderArgs& args, const FilterResult& result);

struct HostScore {
  std::string_view host;  // into the ExtenderArgs' node names
  int score = 0;
};
std::string EncodePrioritizeResult(const std::vector<HostScore>& scores);

struct BindArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
  static Result<BindArgs> Parse(std::string_view body);
};
std::string EncodeError(std::string_view error);  // {"Error": "..."}: the bind reply and 4xx bodies

struct MetaVictims {
  std::vector<std::string> pod_uids;
  int64_t num_pdb_violations = 0;
};
struct PreemptArgs {
  std::shared_ptr<const PodFacts> pod;
  // From NodeNameToMetaVictims, or NodeNameToVictims (full pods) when that is what came.
  std::map<std::string, MetaVictims> victims;
  static Result<PreemptArgs> Parse(std::string_view body, const PodReader& read);
};
std::string EncodePreemptResult(const std::map<std::string, MetaVictims>& victims);

// Appends `text` as a JSON string literal (quotes, backslashes and control characters escaped).
void AppendJsonString(std::string& out, std::string_view text);
// Appends a reason kube-scheduler shows as AppendJsonString does, with each '%' (kube-scheduler formats
// reasons as a format string, and pod fields such as annotations may hold one) written as U+FF05 '％'.
void AppendReason(std::string& out, std::string_view text);

// The value of `key` in a JSON object, matched in any case; null when absent.
const nlohmann::json* FieldAnyCase(const nlohmann::json& object, std::string_view key);

}  // namespace mgpu::extender
