// Kubernetes manifests in YAML read as the JSON objects the API server would hold. Plain scalars become
// numbers, booleans or null where YAML 1.1 core types say so; quoted scalars stay strings.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace mgpu {

// Every document of a (multi-document) YAML stream; empty documents are skipped.
Result<std::vector<nlohmann::json>> YamlDocumentsToJson(std::string_view yaml_text);

}  // namespace mgpu
