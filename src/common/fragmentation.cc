#include "common/fragmentation.h"

#include <algorithm>

namespace mgpu {

WorkloadModel::WorkloadModel(double decay) : decay_(decay) {}

void WorkloadModel::Age() {
  increment_ /= decay_;
  if (increment_ < 1e100) return;
  for (double& w : single_) w /= increment_;
  for (auto& s : multi_) s.weight /= increment_;
  total_ /= increment_;
  increment_ = 1.0;
}

void WorkloadModel::Observe(const PodRequest& pod) {
  if (pod.qos != Qos::kOnline) return;
  for (const ContainerRequest& c : pod.containers) {
    Age();
    const int core = std::clamp(c.CorePerCard(), 1, 100);
    if (c.card_count == 1) {
      single_[core] += increment_;
    } else {
      auto it = std::find_if(multi_.begin(), multi_.end(), [&](const MultiCardShape& s) {
        return s.core_per_card == core && s.cards == c.card_count;
      });
      if (it == multi_.end()) {
        multi_.push_back({core, c.card_count, increment_});
      } else {
        it->weight += increment_;
      }
    }
    total_ += increment_;
  }
  single_above_[101] = 0;
  for (int f = 100; f >= 0; --f)
    single_above_[f] = single_above_[f + 1] + (f + 1 <= 100 ? single_[f + 1] : 0) / total_;
}

double WorkloadModel::Fragmentation(const std::vector<int>& free) const {
  if (total_ == 0) return 0;
  double frag = 0;
  int total_free = 0;
  for (int f : free) {
    frag += f * single_above_[f];  // one-card shapes that need more than this card has
    total_free += f;
  }
  for (const MultiCardShape& s : multi_) {
    int fits = 0, lost = 0;
    for (int f : free) {
      if (f >= s.core_per_card) {
        ++fits;
      } else {
        lost += f;
      }
    }
    frag += s.weight / total_ * (fits < s.cards ? total_free : lost);
  }
  return frag;
}

double WorkloadModel::Fragmentation(const NodeState& node) const { return Fragmentation(FreeCore(node)); }

std::vector<int> FreeCore(const NodeState& node) {
  std::vector<int> free;
  free.reserve(node.cards.size());
  for (const CardState& c : node.cards) {
    free.push_back(c.card.healthy && c.usage.exclusive_holders == 0 ? 100 - c.usage.core : 0);
  }
  return free;
}

}  // namespace mgpu
