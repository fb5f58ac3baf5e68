// Randomized: thousands of pods applied to and released from random nodes never leave a card over its online
// core, reclaimed core or memory capacity or against a rule of §4, and releasing restores usage exactly.
#include <gtest/gtest.h>

#include <random>

#include "common/allocator.h"
#include "common/test_util.h"

namespace mgpu {
namespace {

struct Placed {
  PodRequest pod;
  Assignment assignment;
};

class World {
 public:
  explicit World(uint32_t seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  NodeState RandomNode() {
    Config config;
    config.reserved_memory_mib = Uniform(0, 1) * 512;
    config.memory_unit_mib = Chance(0.5) ? 1 : 64;
    const int64_t memories[] = {16384, 24576, 40960, 81920};
    const int64_t memory = memories[Uniform(0, 3)];
    NodeState node = test::Node("n", Uniform(1, 8), memory, config);
    for (auto& c : node.cards) c.card.healthy = !Chance(0.1);
    return node;
  }

  PodRequest RandomPod(int serial, int64_t card_memory) {
    PodRequest p;
    p.namespace_name = "ns";
    p.name = "p" + std::to_string(serial);
    const ComputePolicy policies[] = {ComputePolicy::kFixedShare, ComputePolicy::kGuaranteedBurstShare,
                                      ComputePolicy::kNativeBurstShare};
    p.qos = Chance(0.35) ? Qos::kOffline : Qos::kOnline;
    p.compute_policy = policies[Uniform(0, p.qos == Qos::kOffline ? 1 : 2)];
    p.card_policy = Chance(0.5) ? CardPolicy::kBinpack : CardPolicy::kSpread;
    p.dedicated = p.qos == Qos::kOnline && Chance(0.05);
    const int containers = Chance(0.8) ? 1 : 2;
    for (int i = 0; i < containers; ++i) {
      ContainerRequest c;
      c.name = "c" + std::to_string(i);
      c.card_count = p.qos == Qos::kOnline && Chance(0.2) ? Uniform(2, 4) : 1;
      const int per_card_core = p.dedicated ? 100 : Uniform(1, 20) * 5;
      const int64_t per_card_memory = Uniform(1, static_cast<int>(card_memory / 1024)) * 1024 / Uniform(1, 4);
      if (p.qos == Qos::kOnline) {
        c.core = per_card_core * c.card_count;
      } else {
        c.reclaimed_core = per_card_core;
      }
      c.memory_mib = per_card_memory * c.card_count;
      p.containers.push_back(c);
    }
    return p;
  }

  // A random assignment of a pod's containers to the node's cards, valid or not.
  Assignment RandomAssignment(const NodeState& node, const PodRequest& pod) {
    Assignment a;
    for (const auto& c : pod.containers) {
      ContainerAssignment ca{c.name, {}};
      for (int k = 0; k < c.card_count; ++k) {
        const auto& card = node.cards[Uniform(0, static_cast<int>(node.cards.size()) - 1)];
        ca.cards.push_back({card.card.uuid, c.CorePerCard(), c.ReclaimedCorePerCard(), c.MemoryPerCardMiB()});
      }
      a.containers.push_back(ca);
    }
    return a;
  }

 private:
  std::mt19937 rng_;
};

// Usage recomputed from the placed pods, for comparison with what Apply/Release maintained.
std::map<std::string, CardUsage> Recount(const std::vector<Placed>& placed) {
  std::map<std::string, CardUsage> out;
  for (const Placed& p : placed) {
    for (const auto& ca : p.assignment.containers) {
      const ContainerRequest* c = nullptr;
      for (const auto& r : p.pod.containers) {
        if (r.name == ca.container) c = &r;
      }
      for (const auto& s : ca.cards) {
        CardUsage& u = out[s.uuid];
        u.core += s.core;
        u.reclaimed_core += s.reclaimed_core;
        u.memory_mib += s.memory_mib;
        u.holders++;
        u.offline_holders += p.pod.qos == Qos::kOffline;
        u.multi_card_holders += c->card_count > 1;
        u.exclusive_holders += p.pod.dedicated;
        u.policy = p.pod.compute_policy;
      }
    }
  }
  return out;
}

void CheckInvariants(const NodeState& node, const std::vector<Placed>& placed) {
  const auto recount = Recount(placed);
  for (const CardState& c : node.cards) {
    const CardUsage& u = c.usage;
    ASSERT_LE(u.core, 100) << c.card.uuid;
    ASSERT_LE(u.reclaimed_core, 100) << c.card.uuid;
    ASSERT_LE(u.memory_mib, c.capacity_mib) << c.card.uuid;
    ASSERT_FALSE(u.offline_holders > 0 && u.multi_card_holders > 0) << c.card.uuid;
    ASSERT_TRUE(u.exclusive_holders == 0 || u.holders == 1) << c.card.uuid;
    auto it = recount.find(c.card.uuid);
    const CardUsage expected = it == recount.end() ? CardUsage{} : it->second;
    ASSERT_EQ(u, expected) << c.card.uuid;
  }
  // One compute policy per card: every holder agrees.
  std::map<std::string, ComputePolicy> policy;
  for (const Placed& p : placed) {
    for (const auto& ca : p.assignment.containers) {
      for (const auto& s : ca.cards) {
        auto [it, fresh] = policy.emplace(s.uuid, p.pod.compute_policy);
        ASSERT_TRUE(fresh || it->second == p.pod.compute_policy) << s.uuid;
        ASSERT_TRUE(node.FindCard(s.uuid)->card.healthy) << s.uuid;
      }
    }
  }
}

TEST(AllocatorProperty, RandomPodsNeverOvercommitAndReleaseRestoresUsage) {
  int placed_total = 0, rejected_total = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    World w(seed);
    NodeState node = w.RandomNode();
    const NodeState empty = node;
    const int64_t card_memory = node.cards[0].card.memory_mib;
    std::vector<Placed> placed;
    for (int op = 0; op < 60; ++op) {
      const int kind = w.Uniform(0, 9);
      if (kind < 5) {  // place through the allocator's own choice
        PodRequest pod = w.RandomPod(op, card_memory);
        auto a = ChooseCards(node, pod);
        if (a.ok()) {
          Status s = Apply(node, pod, *a);
          ASSERT_TRUE(s.ok()) << "chosen cards must apply: " << s.message();
          placed.push_back({pod, *a});
          ++placed_total;
        } else {
          ASSERT_FALSE(a.message().empty());
          ++rejected_total;
        }
      } else if (kind < 8) {  // apply an arbitrary assignment: accepted only if every rule holds
        PodRequest pod = w.RandomPod(op, card_memory);
        Assignment a = w.RandomAssignment(node, pod);
        const NodeState before = node;
        Status s = Apply(node, pod, a);
        if (s.ok()) {
          placed.push_back({pod, a});
        } else {
          for (size_t i = 0; i < node.cards.size(); ++i)
            ASSERT_EQ(node.cards[i].usage, before.cards[i].usage);
        }
      } else if (!placed.empty()) {  // release a random pod
        const size_t i = static_cast<size_t>(w.Uniform(0, static_cast<int>(placed.size()) - 1));
        Status s = Release(node, placed[i].pod, placed[i].assignment);
        ASSERT_TRUE(s.ok()) << s.message();
        placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(i));
      }
      CheckInvariants(node, placed);
      if (HasFatalFailure()) return;
    }
    while (!placed.empty()) {
      ASSERT_TRUE(Release(node, placed.back().pod, placed.back().assignment).ok());
      placed.pop_back();
    }
    for (size_t i = 0; i < node.cards.size(); ++i) ASSERT_EQ(node.cards[i].usage, empty.cards[i].usage);
  }
  // The generator must exercise both outcomes, or the test proves nothing.
  EXPECT_GT(placed_total, 1000);
  EXPECT_GT(rejected_total, 500);
}

}  // namespace
}  // namespace mgpu
