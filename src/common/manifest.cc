#include "common/manifest.h"

#include "common/codec.h"
#include "common/yaml_json.h"

namespace mgpu {
namespace {

using nlohmann::json;

int64_t Replicas(const json& workload) {
  const json& spec = workload.value("spec", json::object());
  for (const char* key : {"replicas", "parallelism"}) {
    if (spec.contains(key) && spec[key].is_number_integer()) return spec[key].get<int64_t>();
  }
  return 1;
}

}  // namespace

Result<std::vector<ManifestPod>> PodsOfManifests(std::string_view yaml_text) {
  auto docs = YamlDocumentsToJson(yaml_text);
  if (!docs.ok()) return docs.error();
  std::vector<ManifestPod> out;
  for (const json& doc : *docs) {
    if (!doc.is_object()) return Error{"a manifest document is not a mapping"};
    const std::string kind = doc.value("kind", "");
    const json meta = doc.value("metadata", json::object());
    const std::string name = meta.value("name", "");
    const std::string ns = meta.value("namespace", "default");
    if (kind == "Pod") {
      json pod = doc;
      pod["metadata"]["namespace"] = ns;
      out.push_back({std::move(pod), {}, nullptr});
      continue;
    }
    if (kind != "Deployment" && kind != "ReplicaSet" && kind != "StatefulSet" && kind != "Job") continue;
    const json& spec = doc.value("spec", json::object());
    if (!spec.contains("template") || !spec["template"].is_object()) {
      return Error{kind + " " + ns + "/" + name + " has no spec.template"};
    }
    const int64_t replicas = Replicas(doc);
    if (replicas < 0 || replicas > 10000) {
      return Error{kind + " " + ns + "/" + name + " asks for " + std::to_string(replicas) + " replicas"};
    }
    for (int64_t i = 0; i < replicas; ++i) {
      json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
      pod["metadata"] = spec["template"].value("metadata", json::object());
      pod["metadata"]["name"] = name + "-" + std::to_string(i);
      pod["metadata"]["namespace"] = ns;
      pod["spec"] = spec["template"].value("spec", json::object());
      out.push_back({std::move(pod), AnnotationsOf(doc), doc});
    }
  }
  return out;
}

Result<std::vector<SampleNode>> SampleNodesOf(std::string_view yaml_text) {
  auto docs = YamlDocumentsToJson(yaml_text);
  if (!docs.ok()) return docs.error();
  std::vector<SampleNode> nodes;
  for (const json& doc : *docs) {
    if (!doc.is_array()) return Error{"expected a list of nodes"};
    for (const json& n : doc) {
      if (!n.is_object() || !n.contains("name") || !n["name"].is_string() || !n.contains("inventory"))
        return Error{"every node needs a name and an inventory"};
      auto inventory = DecodeInventory(n["inventory"].dump());
      if (!inventory.ok()) return Error{"node " + n["name"].get<std::string>() + ": " + inventory.message()};
      nodes.push_back({n["name"].get<std::string>(), std::move(*inventory)});
    }
  }
  return nodes;
}

}  // namespace mgpu
