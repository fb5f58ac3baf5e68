// A kubeconfig file (its relative paths resolve into a directory that does not exist).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/kube/kubeconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)mgpu::kube::ParseKubeconfig(text, "/nonexistent-mgpu-fuzz");
  return 0;
}
