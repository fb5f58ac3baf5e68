// One kind of call a daemon makes to the API server, as RBAC names it: API group, resource (with its
// subresource, "pods/binding"), verb. Each daemon lists all of its calls in one place (api_calls.h beside its
// main.cc); tests/deploy checks that its RBAC in deploy/ grants exactly those, and that a run against the
// fake API server makes no other.
#pragma once

#include <compare>
#include <string_view>

namespace mgpu::kube {

struct ApiCall {
  std::string_view group;  // "" for the core group
  std::string_view resource;
  std::string_view verb;
  auto operator<=>(const ApiCall&) const = default;
};

}  // namespace mgpu::kube
