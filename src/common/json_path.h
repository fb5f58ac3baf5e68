// Reading fields out of Kubernetes objects, one way for every part: a missing step or a value of another type
// reads as absent, never as an exception.
#pragma once

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace mgpu {

// The value at `path` (keys of nested objects), or null when a step is missing or not an object.
const nlohmann::json* FindPath(const nlohmann::json& object, std::initializer_list<const char*> path);
// The string at `path`, or "" when it is missing or not a string.
std::string StringAt(const nlohmann::json& object, std::initializer_list<const char*> path);
// metadata.<key> of an object when it is a string ("name", "namespace", "uid", "resourceVersion"), else "".
std::string MetadataString(const nlohmann::json& object, const char* key);
// `key` as one token of a JSON pointer (RFC 6901: '~' and '/' escaped), for the paths of a JSON patch.
std::string PointerToken(const std::string& key);

}  // namespace mgpu
