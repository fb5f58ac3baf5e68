#include "common/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <charconv>

namespace mgpu {
namespace {

using nlohmann::json;

json Scalar(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() != "?") return s;  // quoted or explicitly tagged: a string
  if (s == "null" || s == "~" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  int64_t i = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (ec == std::errc() && end == s.data() + s.size()) return i;
  double d = 0;
  auto [dend, dec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (dec == std::errc() && dend == s.data() + s.size()) return d;
  return s;
}

json Convert(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return Scalar(node);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(Convert(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = Convert(kv.second);
      return out;
    }
    default:
      return nullptr;
  }
}

}  // namespace

Result<std::vector<json>> YamlDocumentsToJson(std::string_view yaml_text) {
  std::vector<json> out;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(std::string(yaml_text))) {
      if (!doc || doc.IsNull()) continue;
      out.push_back(Convert(doc));
    }
  } catch (const YAML::Exception& e) {
    return Error{std::string("not valid YAML: ") + e.what()};
  }
  return out;
}

}  // namespace mgpu
