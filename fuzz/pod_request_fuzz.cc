// A pod (JSON) through the request rules of DESIGN §3. Property: the fields KeepSchedulingFields keeps are
// all the rules read, so the slimmed pod asks for exactly the same.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/request.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  json pod = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return 0;
  static const mgpu::Config config;
  const mgpu::Result<mgpu::PodRequest> full = mgpu::ParsePodRequest(pod, config);
  const mgpu::HostRequest host = mgpu::HostRequestOf(pod);
  (void)mgpu::GpuModelsOf(pod, config.Names().label_product);
  (void)mgpu::ControllerOf(pod);
  mgpu::KeepSchedulingFields(pod, config);
  const mgpu::Result<mgpu::PodRequest> slim = mgpu::ParsePodRequest(pod, config);
  MGPU_FUZZ_CHECK(full.ok() == slim.ok());
  if (full.ok()) {
    MGPU_FUZZ_CHECK(full->containers == slim->containers);
    MGPU_FUZZ_CHECK(full->gpu_models == slim->gpu_models);
  } else {
    MGPU_FUZZ_CHECK(full.message() == slim.message());
  }
  MGPU_FUZZ_CHECK(mgpu::HostRequestOf(pod) == host);
  return 0;
}
