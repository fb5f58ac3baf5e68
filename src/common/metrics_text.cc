#include "common/metrics_text.h"

namespace mgpu {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string PodLabels(std::string_view node, std::string_view pod_key) {
  const size_t slash = pod_key.find('/');
  const std::string_view ns = slash == std::string_view::npos ? std::string_view() : pod_key.substr(0, slash);
  const std::string_view name = slash == std::string_view::npos ? pod_key : pod_key.substr(slash + 1);
  return "node=\"" + EscapeLabelValue(node) + "\",namespace=\"" + EscapeLabelValue(ns) + "\",pod=\"" +
         EscapeLabelValue(name) + "\"";
}

}  // namespace mgpu
