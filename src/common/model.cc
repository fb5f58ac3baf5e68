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

double GpuShare(const CardShare& piece, int64_t card_memory_mib) {
  const double memory =
      card_memory_mib > 0 ? static_cast<double>(piece.memory_mib) / static_cast<double>(card_memory_mib) : 0;
  return std::max(std::max(piece.core, piece.reclaimed_core) / 100.0, memory);
}

}  // namespace mgpu
