// A small cluster for the extender's fuzz targets: three nodes (one with a bad inventory) and a placed pod,
// and an Extender with no API client over it. Built once per process.
#pragma once

#include "common/cluster_cache.h"
#include "extender/extender.h"
#include "extender/metrics.h"
#include "common/test_objects.h"

namespace mgpu::fuzz {

struct ExtenderWorld {
  ExtenderWorld() : cache(Config()), extender(cache, nullptr, nullptr, metrics) {
    using namespace testobj;
    const ResourceNames names = Config().Names();
    cache.UpsertNode(NodeOf(Node("n1", 2, 16000)));
    cache.UpsertNode(NodeOf(Node("n2", 1, 8000, "Other GPU")));
    nlohmann::json bad = Node("bad", 1);
    bad["metadata"]["annotations"][names.gpu_inventory] = "{";
    cache.UpsertNode(NodeOf(bad));
    cache.UpsertPod(PodOf(Placed(Pod("placed", 50, 4000, "uid-placed"), "n1", names.gpu_allocated,
                                 OneCard("n1-gpu0", 50, 4000))));
  }
  extender::Metrics metrics;
  ClusterCache cache;
  extender::Extender extender;
};

inline ExtenderWorld& World() {
  static ExtenderWorld* world = new ExtenderWorld();  // never destroyed: libFuzzer exits without unwinding
  return *world;
}

}  // namespace mgpu::fuzz
