#include "common/json_path.h"

namespace mgpu {

const nlohmann::json* FindPath(const nlohmann::json& object, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &object;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string StringAt(const nlohmann::json& object, std::initializer_list<const char*> path) {
  const nlohmann::json* value = FindPath(object, path);
  return value && value->is_string() ? value->get<std::string>() : "";
}

std::string MetadataString(const nlohmann::json& object, const char* key) {
  return StringAt(object, {"metadata", key});
}

std::string PointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mgpu
