// What the API server sends the informers: a list answer, or watch lines, whose node and pod objects the
// extender's cache takes in. The first byte picks list or watch.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/cluster_cache.h"
#include "common/kube/client.h"
#include "common/node_facts.h"
#include "common/pod_facts.h"

namespace {

// As the extender's informer handlers do: each object read once at the edge, the cache given the facts.
void Apply(mgpu::ClusterCache& cache, const std::string& type, const nlohmann::json& object) {
  const mgpu::Config config;
  const bool node = mgpu::kube::StringAt(object, {"kind"}) == "Node";
  if (type == "DELETED") {
    node ? cache.DeleteNode(mgpu::kube::MetadataString(object, "name"))
         : cache.DeletePod(mgpu::PodKeyOf(object), mgpu::kube::MetadataString(object, "uid"));
  } else {
    node ? cache.UpsertNode(mgpu::ReadNode(object, config)) : cache.UpsertPod(mgpu::ReadPod(object, config));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  mgpu::ClusterCache cache{mgpu::Config()};
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    const nlohmann::json list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const auto items = list.is_object() ? list.find("items") : list.end();
    if (items != list.end() && items->is_array())
      for (const nlohmann::json& item : *items) Apply(cache, "ADDED", item);
  } else {
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      if (auto event = mgpu::kube::ParseWatchLine(text.substr(start, end - start)))
        Apply(cache, event->type, event->object);
      start = end + 1;
    }
  }
  for (const mgpu::NodeView* node : cache.Snapshot()->Nodes()) (void)node->state.cards.size();
  return 0;
}
