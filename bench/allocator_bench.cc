// Fit + choose + score for one pod on one 8-card node: the per-node work of the extender's filter and
// prioritize. Run: build/bench/mgpu_allocator_bench
#include <benchmark/benchmark.h>

#include "common/allocator.h"

namespace mgpu {
namespace {

NodeState EightCardNode(int busy_cards) {
  NodeInventory inv;
  for (int i = 0; i < 8; ++i)
    inv.cards.push_back(Card{i, "GPU-" + std::to_string(i), "NVIDIA A100", 81920, true});
  NodeState node = MakeNodeState("n", inv, Config());
  for (int i = 0; i < busy_cards; ++i) {
    node.cards[i].usage.core = 20 + 10 * i;
    node.cards[i].usage.memory_mib = 8192 * (i + 1);
    node.cards[i].usage.holders = 1;
  }
  return node;
}

PodRequest Pod(int core, int64_t memory_mib, int cards, Qos qos) {
  PodRequest p;
  p.namespace_name = "ns";
  p.name = "p";
  p.qos = qos;
  ContainerRequest c{"c",        false, qos == Qos::kOnline ? core : 0, qos == Qos::kOffline ? core : 0,
                     memory_mib, cards};
  p.containers.push_back(c);
  return p;
}

void Run(benchmark::State& state, const PodRequest& pod) {
  const NodeState node = EightCardNode(static_cast<int>(state.range(0)));
  Placement placed;
  for (auto _ : state) {
    double cost =
        Place(node, pod, nullptr, placed) ? PlacementCost(node, pod, placed, NodePolicy::kBinpack) : 0;
    benchmark::DoNotOptimize(cost);
  }
}

void BM_FitChooseScore_Shared(benchmark::State& state) { Run(state, Pod(30, 4096, 1, Qos::kOnline)); }
void BM_FitChooseScore_Offline(benchmark::State& state) { Run(state, Pod(30, 4096, 1, Qos::kOffline)); }
void BM_FitChooseScore_FourCards(benchmark::State& state) { Run(state, Pod(200, 16384, 4, Qos::kOnline)); }

BENCHMARK(BM_FitChooseScore_Shared)->Arg(0)->Arg(4)->Arg(8);
BENCHMARK(BM_FitChooseScore_Offline)->Arg(0)->Arg(8);
BENCHMARK(BM_FitChooseScore_FourCards)->Arg(0)->Arg(4);

}  // namespace
}  // namespace mgpu

BENCHMARK_MAIN();
