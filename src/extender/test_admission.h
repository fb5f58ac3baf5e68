// For the webhooks' tests: what the API server stores of an object an AdmissionReview response allowed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace mgpu::testadmission {

// `object` with the response's JSON patch (base64, RFC 6902) applied; `object` itself when there is none.
inline nlohmann::json Patched(const nlohmann::json& object, const nlohmann::json& response) {
  if (!response.contains("patch")) return object;
  EXPECT_EQ(response["patchType"], "JSONPatch");
  const std::string b64 = response["patch"];
  std::string bytes;
  static const std::string kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(kDigits.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return object.patch(nlohmann::json::parse(bytes));
}

}  // namespace mgpu::testadmission
