// Test-only: a ClaimReader over a test's own claims (the edge the Preparer reads through; the daemon's tests
// read through the fake API server instead). The claims themselves: common/test_objects.h.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/test_objects.h"
#include "dra/prepare.h"

namespace mgpu::dra::test {

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
