// Prometheus text exposition helpers shared by both daemons' /metrics.
#pragma once

#include <string>
#include <string_view>

namespace mgpu {

// A label value with backslash, double quote and newline escaped as the text format requires.
std::string EscapeLabelValue(std::string_view value);

// The labels of a per-pod series, one set for both daemons: node="N",namespace="NS",pod="NAME" for the pod
// `pod_key` ("namespace/name") on node `node`, escaped.
std::string PodLabels(std::string_view node, std::string_view pod_key);

}  // namespace mgpu
