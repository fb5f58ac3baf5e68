#include "node/environment.h"

#include <gtest/gtest.h>

namespace mgpu::node {
namespace {

ResourceAllocation TwoCards(Resource resource, int64_t per_card) {
  return ResourceAllocation{
      resource, {{0, "GPU-a", "A10", 24576, true}, {3, "GPU-d", "A10", 24576, true}}, per_card};
}

using Env = std::map<std::string, std::string>;

TEST(Environment, NoneCarriesOnlyTheCommonVariables) {
  IsolationConfig none;
  none.backend = IsolationBackend::kNone;
  auto core = BuildEnvironment(TwoCards(Resource::kCore, 50), none, ComputePolicy::kGuaranteedBurstShare);
  EXPECT_EQ(core.envs, (Env{{"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-d"},
                            {"MGPU_VISIBLE_CARDS", "GPU-a,GPU-d"},
                            {"MGPU_CORE_PERCENT", "50"},
                            {"MGPU_QOS_LEVEL", "online"},
                            {"MGPU_COMPUTE_POLICY", "guaranteed-burst-share"}}));
  EXPECT_TRUE(core.mounts.empty());
  auto memory = BuildEnvironment(TwoCards(Resource::kMemory, 4096), none, ComputePolicy::kFixedShare);
  EXPECT_EQ(memory.envs, (Env{{"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-d"},
                              {"MGPU_VISIBLE_CARDS", "GPU-a,GPU-d"},
                              {"MGPU_MEMORY_MIB", "4096"}}));
  auto offline = BuildEnvironment(TwoCards(Resource::kReclaimedCore, 40), none, ComputePolicy::kFixedShare);
  EXPECT_EQ(offline.envs.at("MGPU_RECLAIMED_CORE_PERCENT"), "40");
  EXPECT_EQ(offline.envs.at("MGPU_QOS_LEVEL"), "offline");
  EXPECT_FALSE(offline.envs.count("MGPU_CORE_PERCENT"));
}

TEST(Environment, HamiCoreLimitsEachCardAndPreloadsTheLibrary) {
  IsolationConfig hami{IsolationBackend::kHamiCore, "/opt/vgpu/libvgpu.so", "/tmp/mps"};
  auto memory = BuildEnvironment(TwoCards(Resource::kMemory, 4096), hami, ComputePolicy::kFixedShare);
  EXPECT_EQ(memory.envs.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "4096m");
  EXPECT_EQ(memory.envs.at("CUDA_DEVICE_MEMORY_LIMIT_1"), "4096m");
  EXPECT_FALSE(memory.envs.count("CUDA_DEVICE_SM_LIMIT"));
  const std::vector<ContainerMount> mounts = {{"/opt/vgpu/libvgpu.so", "/opt/vgpu/libvgpu.so", true},
                                              {"/etc/ld.so.preload", "/opt/vgpu/ld.so.preload", true}};
  EXPECT_EQ(memory.mounts, mounts);
  auto core = BuildEnvironment(TwoCards(Resource::kCore, 50), hami, ComputePolicy::kFixedShare);
  EXPECT_EQ(core.envs.at("CUDA_DEVICE_SM_LIMIT"), "50");
  EXPECT_FALSE(core.envs.count("CUDA_DEVICE_MEMORY_LIMIT_0"));
  EXPECT_EQ(core.mounts, mounts);  // identical in both responses: the kubelet's merge keeps one
  EXPECT_EQ(PreloadContent(hami.hami_library_path), "/opt/vgpu/libvgpu.so\n");
}

TEST(Environment, MpsLimitsThreadsAndPinnedMemory) {
  IsolationConfig mps{IsolationBackend::kMps, "/x/libvgpu.so", "/run/nvidia-mps"};
  auto memory = BuildEnvironment(TwoCards(Resource::kMemory, 2048), mps, ComputePolicy::kFixedShare);
  EXPECT_EQ(memory.envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=2048M,1=2048M");
  EXPECT_EQ(memory.envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/nvidia-mps");
  auto core = BuildEnvironment(TwoCards(Resource::kReclaimedCore, 30), mps, ComputePolicy::kFixedShare);
  EXPECT_EQ(core.envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  EXPECT_EQ(core.envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/nvidia-mps");
  ASSERT_EQ(core.mounts.size(), 1u);
  EXPECT_EQ(core.mounts[0], (ContainerMount{"/run/nvidia-mps", "/run/nvidia-mps", false}));
}

TEST(Environment, MgpuPreloadsTheGuardAndMountsEachCardsState) {
  IsolationConfig mgpu;  // the default backend
  ASSERT_EQ(mgpu.backend, IsolationBackend::kMgpu);
  mgpu.guard_library_path = "/var/lib/mgpu/lib/libmgpu-guard.so";
  mgpu.guard_state_directory = "/var/lib/mgpu/cards";
  const std::vector<ContainerMount> mounts = {
      {"/var/lib/mgpu/lib/libmgpu-guard.so", "/var/lib/mgpu/lib/libmgpu-guard.so", true},
      {"/etc/ld.so.preload", "/var/lib/mgpu/lib/ld.so.preload", true},
      {"/var/lib/mgpu/cards/GPU-a", "/var/lib/mgpu/cards/GPU-a", false},  // the guards write their state
      {"/var/lib/mgpu/cards/GPU-d", "/var/lib/mgpu/cards/GPU-d", false}};
  auto core = BuildEnvironment(TwoCards(Resource::kCore, 30), mgpu, ComputePolicy::kFixedShare);
  auto memory = BuildEnvironment(TwoCards(Resource::kMemory, 4096), mgpu, ComputePolicy::kFixedShare);
  EXPECT_EQ(core.mounts, mounts);
  EXPECT_EQ(memory.mounts, mounts);  // identical in both responses: the kubelet's merge keeps one
  EXPECT_EQ(core.envs.at("MGPU_GUARD_STATE_DIR"), "/var/lib/mgpu/cards");
  EXPECT_EQ(memory.envs.at("MGPU_GUARD_STATE_DIR"), "/var/lib/mgpu/cards");
  EXPECT_EQ(core.envs.at("MGPU_CORE_PERCENT"), "30");
  EXPECT_EQ(memory.envs.at("MGPU_MEMORY_MIB"), "4096");
  // One token per container, from its mgpu-memory response only, fresh every time.
  EXPECT_FALSE(core.envs.count("MGPU_CONTAINER_TOKEN"));
  const std::string token = memory.envs.at("MGPU_CONTAINER_TOKEN");
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  auto again = BuildEnvironment(TwoCards(Resource::kMemory, 4096), mgpu, ComputePolicy::kFixedShare);
  EXPECT_NE(again.envs.at("MGPU_CONTAINER_TOKEN"), token);
  auto offline = BuildEnvironment(TwoCards(Resource::kReclaimedCore, 40), mgpu, ComputePolicy::kFixedShare);
  EXPECT_EQ(offline.envs.at("MGPU_QOS_LEVEL"), "offline");
  EXPECT_EQ(offline.mounts, mounts);
  EXPECT_EQ(PreloadContent(mgpu.guard_library_path), "/var/lib/mgpu/lib/libmgpu-guard.so\n");
}

TEST(Environment, ResponsesOfOneContainerNeverContradictEachOther) {
  for (auto backend : {IsolationBackend::kNone, IsolationBackend::kHamiCore, IsolationBackend::kMps,
                       IsolationBackend::kMgpu}) {
    IsolationConfig iso{backend, "/v/libvgpu.so", "/run/mps"};
    auto core = BuildEnvironment(TwoCards(Resource::kCore, 50), iso, ComputePolicy::kFixedShare);
    auto memory = BuildEnvironment(TwoCards(Resource::kMemory, 100), iso, ComputePolicy::kFixedShare);
    for (const auto& [k, v] : memory.envs) {
      if (core.envs.count(k)) {
        EXPECT_EQ(core.envs.at(k), v) << k;
      }
    }
  }
}

}  // namespace
}  // namespace mgpu::node
