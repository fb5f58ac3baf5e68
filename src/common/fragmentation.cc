#include "common/fragmentation.h"

#include <algorithm>

namespace mgpu {

WorkloadModel::WorkloadModel(double decay) : decay_(decay) {}

void WorkloadModel::Age() {
  increment_ /= decay_;
  if (increment_ < 1e100) return;
  for (Shape& s : shapes_) s.weight /= increment_;
  total_ /= increment_;
  increment_ = 1.0;
}

void WorkloadModel::Add(int core_per_card, int cards, int64_t cpu_milli) {
  Age();
  auto it = std::find_if(shapes_.begin(), shapes_.end(), [&](const Shape& s) {
    return s.core_per_card == core_per_card && s.cards == cards && s.cpu_milli == cpu_milli;
  });
  if (it == shapes_.end()) {
    shapes_.push_back({core_per_card, cards, cpu_milli, increment_});
  } else {
    it->weight += increment_;
  }
  total_ += increment_;
}

void WorkloadModel::Observe(const PodRequest& pod) {
  if (pod.qos != Qos::kOnline) return;
  if (pod.containers.empty()) return;
  for (const ContainerRequest& c : pod.containers)
    Add(std::clamp(c.CorePerCard(), 1, 100), c.card_count, pod.cpu_milli);
  Rebuild();
}

void WorkloadModel::Rebuild() {
  cpu_steps_.clear();
  multi_.clear();
  for (const Shape& s : shapes_) {
    if (s.cards == 1) {
      cpu_steps_.push_back(s.cpu_milli);
    } else {
      multi_.push_back({s.core_per_card, s.cards, s.cpu_milli, s.weight / total_});
    }
  }
  std::sort(cpu_steps_.begin(), cpu_steps_.end());
  cpu_steps_.erase(std::unique(cpu_steps_.begin(), cpu_steps_.end()), cpu_steps_.end());
  const size_t steps = cpu_steps_.size();
  // Row j: the one-card shapes whose CPU is among the j smallest asks, by core needed.
  std::vector<std::vector<double>> by_core(steps + 1, std::vector<double>(101, 0.0));
  cpu_short_.assign(steps + 1, 0.0);
  for (const Shape& s : shapes_) {
    if (s.cards != 1) continue;
    const size_t step =
        std::lower_bound(cpu_steps_.begin(), cpu_steps_.end(), s.cpu_milli) - cpu_steps_.begin();
    const double w = s.weight / total_;
    for (size_t j = step + 1; j <= steps; ++j) by_core[j][s.core_per_card] += w;
    for (size_t j = 0; j <= step; ++j) cpu_short_[j] += w;
  }
  single_above_.assign(steps + 1, std::vector<double>(102, 0.0));
  for (size_t j = 0; j <= steps; ++j) {
    for (int f = 99; f >= 0; --f) single_above_[j][f] = single_above_[j][f + 1] + by_core[j][f + 1];
  }
}

double WorkloadModel::Fragmentation(const std::vector<int>& free, int64_t cpu_free_milli) const {
  if (total_ == 0) return 0;
  const size_t j =
      cpu_free_milli < 0
          ? cpu_steps_.size()
          : std::upper_bound(cpu_steps_.begin(), cpu_steps_.end(), cpu_free_milli) - cpu_steps_.begin();
  const std::vector<double>& above = single_above_[j];
  double frag = 0;
  int total_free = 0;
  for (int f : free) {
    frag += f * above[f];  // one-card shapes that need more core than this card has
    total_free += f;
  }
  frag += cpu_short_[j] * total_free;  // one-card shapes the node's CPU cannot take
  for (const Shape& s : multi_) {
    int fits = 0, lost = 0;
    for (int f : free) {
      if (f >= s.core_per_card) {
        ++fits;
      } else {
        lost += f;
      }
    }
    const bool short_cpu = cpu_free_milli >= 0 && cpu_free_milli < s.cpu_milli;
    frag += s.weight * (fits < s.cards || short_cpu ? total_free : lost);
  }
  return frag;
}

double WorkloadModel::Fragmentation(const NodeState& node) const {
  std::vector<int> free;
  FreeCore(node, nullptr, free);
  return Fragmentation(free, node.cpu_free_milli);
}

void FreeCore(const NodeState& node, const std::vector<CardUsage>* usage, std::vector<int>& out) {
  out.resize(node.cards.size());
  for (size_t i = 0; i < node.cards.size(); ++i) {
    const CardUsage& u = usage ? (*usage)[i] : node.cards[i].usage;
    out[i] = node.cards[i].card.healthy && u.exclusive_holders == 0 ? 100 - u.core : 0;
  }
}

}  // namespace mgpu
