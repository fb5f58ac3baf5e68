// Test-only: ResourceClaim objects as the scheduler leaves them allocated, and a ClaimReader over a test's
// own claims (the edge the Preparer reads through; the daemon's tests read through the fake API server
// instead).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "dra/prepare.h"

namespace mgpu::dra::test {

// One allocation result of `driver` for request "gpu"; `consumed` null: none (a device that is not shared).
inline nlohmann::json Result(const std::string& device, nlohmann::json consumed,
                             const std::string& pool = "node-a", const std::string& driver = "mgpu.io") {
  nlohmann::json r = {{"request", "gpu"},
                      {"driver", driver},
                      {"pool", pool},
                      {"device", device},
                      {"shareID", "share-" + device}};
  if (!consumed.is_null()) r["consumedCapacity"] = consumed;
  return r;
}

// A claim in "default"; `results` null: not allocated.
inline nlohmann::json Claim(const std::string& name, const std::string& uid, nlohmann::json results) {
  nlohmann::json c = {{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceClaim"},
                      {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", uid}}},
                      {"spec", nlohmann::json::object()}};
  if (!results.is_null()) c["status"]["allocation"]["devices"]["results"] = results;
  return c;
}

class Claims final : public ClaimReader {
 public:
  void Put(const nlohmann::json& claim) {
    std::lock_guard lock(mu_);
    objects_[claim["metadata"]["name"].get<std::string>()] = claim;
  }
  mgpu::Result<nlohmann::json> GetClaim(const std::string&, const std::string& name) override {
    reads++;
    std::lock_guard lock(mu_);
    auto it = objects_.find(name);
    if (it == objects_.end()) return mgpu::Error{"resourceclaims \"" + name + "\" not found"};
    return it->second;
  }
  std::atomic<int> reads{0};

 private:
  std::mutex mu_;
  std::map<std::string, nlohmann::json> objects_;
};

}  // namespace mgpu::dra::test
