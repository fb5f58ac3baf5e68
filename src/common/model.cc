#include "common/model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace mgpu {
namespace {

// One table per enum: the names in config, annotations and docs.
constexpr std::array<std::pair<ComputePolicy, std::string_view>, 3> kComputePolicies{{
    {ComputePolicy::kFixedShare, "fixed-share"},
    {ComputePolicy::kGuaranteedBurstShare, "guaranteed-burst-share"},
    {ComputePolicy::kNativeBurstShare, "native-burst-share"},
}};
constexpr std::array<std::pair<CardPolicy, std::string_view>, 3> kCardPolicies{{
    {CardPolicy::kBinpack, "binpack"},
    {CardPolicy::kSpread, "spread"},
    {CardPolicy::kFragmentation, "fragmentation"},
}};
constexpr std::array<std::pair<NodePolicy, std::string_view>, 3> kNodePolicies{{
    {NodePolicy::kBinpack, "binpack"},
    {NodePolicy::kSpread, "spread"},
    {NodePolicy::kFragmentation, "fragmentation"},
}};
constexpr std::array<std::pair<IsolationBackend, std::string_view>, 4> kIsolationBackends{{
    {IsolationBackend::kNone, "none"},
    {IsolationBackend::kHamiCore, "hami-core"},
    {IsolationBackend::kMps, "mps"},
    {IsolationBackend::kMgpu, "mgpu"},
}};

template <typename E, size_t N>
std::string_view NameIn(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "unknown";
}

template <typename E, size_t N>
std::optional<E> ParseIn(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view text) {
  for (const auto& [v, name] : table) {
    if (name == text) return v;
  }
  return std::nullopt;
}

template <typename Card, typename Cards>
Card* FindIn(Cards& cards, std::string_view uuid) {
  for (auto& c : cards) {
    if (c.card.uuid == uuid) return &c;
  }
  return nullptr;
}

}  // namespace

std::string_view Name(ComputePolicy policy) { return NameIn(kComputePolicies, policy); }
std::string_view Name(CardPolicy policy) { return NameIn(kCardPolicies, policy); }
std::string_view Name(NodePolicy policy) { return NameIn(kNodePolicies, policy); }
std::string_view Name(IsolationBackend backend) { return NameIn(kIsolationBackends, backend); }
std::string_view Name(Qos qos) { return qos == Qos::kOnline ? "online" : "offline"; }

std::string PodKey(std::string_view ns, std::string_view name) {
  std::string key(ns.empty() ? std::string_view("default") : ns);
  key += '/';
  key += name;
  return key;
}

double GpuShare(const CardShare& slice, int64_t card_memory_mib) {
  const double core = std::max(slice.core, slice.reclaimed_core) / 100.0;
  const double memory =
      card_memory_mib > 0 ? static_cast<double>(slice.memory_mib) / static_cast<double>(card_memory_mib) : 0;
  return std::max(core, memory);
}

std::optional<ComputePolicy> ParseComputePolicy(std::string_view text) {
  return ParseIn(kComputePolicies, text);
}
std::optional<CardPolicy> ParseCardPolicy(std::string_view text) { return ParseIn(kCardPolicies, text); }
std::optional<NodePolicy> ParseNodePolicy(std::string_view text) { return ParseIn(kNodePolicies, text); }
std::optional<IsolationBackend> ParseIsolationBackend(std::string_view text) {
  return ParseIn(kIsolationBackends, text);
}

std::string LabelValue(std::string_view text) {
  constexpr size_t kMaxLabelValue = 63;
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  std::string out;
  for (char c : text) out.push_back(alnum(c) || c == '-' || c == '_' || c == '.' ? c : '-');
  if (out.size() > kMaxLabelValue) out.resize(kMaxLabelValue);
  const auto first = std::find_if(out.begin(), out.end(), alnum);
  const auto last = std::find_if(out.rbegin(), out.rend(), alnum).base();
  return first < last ? std::string(first, last) : std::string();
}

const CardState* NodeState::FindCard(std::string_view uuid) const {
  return FindIn<const CardState>(cards, uuid);
}
CardState* NodeState::FindCard(std::string_view uuid) { return FindIn<CardState>(cards, uuid); }

const ContainerAssignment* Assignment::Find(std::string_view container) const {
  for (const auto& c : containers) {
    if (c.container == container) return &c;
  }
  return nullptr;
}

std::string DescribeCards(const std::vector<CardShare>& cards, const CardNamer& name) {
  std::string out;
  for (const CardShare& s : cards) {
    if (!out.empty()) out += ", ";
    out += name ? name(s.uuid) : s.uuid;
    std::string amounts;
    const auto add = [&amounts](const std::string& amount) {
      amounts += (amounts.empty() ? "" : ", ") + amount;
    };
    if (s.core) add("mgpu-core " + std::to_string(s.core));
    if (s.reclaimed_core) add("reclaimed-mgpu-core " + std::to_string(s.reclaimed_core));
    if (s.memory_mib) add("mgpu-memory " + std::to_string(s.memory_mib) + " MiB");
    out += " (" + amounts + ")";
  }
  return out;
}

std::string DescribeAssignment(const Assignment& assignment, const CardNamer& name) {
  std::string out;
  for (const ContainerAssignment& c : assignment.containers)
    out += (out.empty() ? "" : "; ") + c.container + ": " + DescribeCards(c.cards, name);
  return out;
}

double PodGpuShare(const Assignment& held,
                   const std::function<int64_t(const std::string& uuid)>& card_memory_mib) {
  double share = 0;
  for (const ContainerAssignment& container : held.containers)
    for (const CardShare& piece : container.cards) share += GpuShare(piece, card_memory_mib(piece.uuid));
  return share;
}

}  // namespace mgpu
