// The shipped manifests agree with the code: the ConfigMap's config parses with leader election on, and the
// scheduler's extender config manages exactly mgpu's three resources, in cache mode, with bind and preempt.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "common/config.h"

namespace mgpu::extender {
namespace {

const std::string kDeploy = std::string(MGPU_SOURCE_DIR) + "/deploy/extender/";

TEST(Deploy, ConfigMapConfigParses) {
  bool found = false;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(kDeploy + "deployment.yaml")) {
    if (doc["kind"].as<std::string>() != "ConfigMap") continue;
    Result<Config> config = ParseConfig(doc["data"]["config.yaml"].as<std::string>(), "deployment.yaml");
    ASSERT_TRUE(config.ok()) << config.message();
    EXPECT_TRUE(config->extender.leader_election);
    EXPECT_LT(config->extender.bind_wait_ms, 10000);  // below the scheduler's httpTimeout
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST(Deploy, SchedulerConfigManagesTheThreeResources) {
  const YAML::Node config = YAML::LoadFile(kDeploy + "scheduler-config.yaml");
  const YAML::Node extender = config["extenders"][0];
  EXPECT_TRUE(extender["nodeCacheCapable"].as<bool>());
  EXPECT_EQ(extender["bindVerb"].as<std::string>(), "bind");
  EXPECT_EQ(extender["filterVerb"].as<std::string>(), "filter");
  EXPECT_EQ(extender["prioritizeVerb"].as<std::string>(), "prioritize");
  EXPECT_EQ(extender["preemptVerb"].as<std::string>(), "preempt");
  std::set<std::string> managed;
  for (const YAML::Node& r : extender["managedResources"]) managed.insert(r["name"].as<std::string>());
  const ResourceNames names = Config().Names();
  EXPECT_EQ(managed, (std::set<std::string>{names.core, names.memory, names.reclaimed_core}));
}

}  // namespace
}  // namespace mgpu::extender
