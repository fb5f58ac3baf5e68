// The shipped DaemonSet and RBAC agree with the code and with the extender's manifests: the plugin mounts the
// one config of both daemons (so it counts memory in the extender's unit), the kubelet folders the config
// names are mounted from the host, the node name comes from the downward API, and the ClusterRole grants
// exactly what the plugin calls. (deploy_test.cc checks what every file under deploy/ shares.)
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>

#include "common/config.h"

namespace mgpu {
namespace {

const std::string kDeploy = std::string(MGPU_SOURCE_DIR) + "/deploy/";

// The first document of `kind` in a YAML stream.
YAML::Node Find(const std::string& file, const std::string& kind) {
  for (const YAML::Node& doc : YAML::LoadAllFromFile(kDeploy + file)) {
    if (doc["kind"].as<std::string>() == kind) return doc;
  }
  ADD_FAILURE() << file << " has no " << kind;
  return YAML::Node();
}

// The one config file of both daemons (deploy/base/config.yaml).
Config SharedConfig() {
  const YAML::Node map = Find("base/config.yaml", "ConfigMap");
  Result<Config> config = ParseConfig(map["data"]["config.yaml"].as<std::string>(), "config.yaml");
  EXPECT_TRUE(config.ok()) << config.message();
  return config.ok() ? *config : Config();
}

// The ConfigMap a workload mounts as its config volume.
std::string ConfigVolume(const std::string& file, const std::string& kind) {
  for (const YAML::Node& v : Find(file, kind)["spec"]["template"]["spec"]["volumes"]) {
    if (v["name"].as<std::string>() == "config") return v["configMap"]["name"].as<std::string>();
  }
  return "";
}

TEST(DevicePluginDeploy, ConfigIsTheExtenders) {
  EXPECT_EQ(ConfigVolume("deviceplugin/daemonset.yaml", "DaemonSet"),
            ConfigVolume("extender/deployment.yaml", "Deployment"));
  EXPECT_EQ(ConfigVolume("deviceplugin/daemonset.yaml", "DaemonSet"),
            Find("base/config.yaml", "ConfigMap")["metadata"]["name"].as<std::string>());
  EXPECT_EQ(SharedConfig().device_plugin.gpu_backend, "nvml");
}

TEST(DevicePluginDeploy, DaemonSetMountsTheKubeletFoldersAndKnowsItsNode) {
  const Config config = SharedConfig();
  const YAML::Node spec = Find("deviceplugin/daemonset.yaml", "DaemonSet")["spec"]["template"]["spec"];
  EXPECT_EQ(spec["priorityClassName"].as<std::string>(), "system-node-critical");
  EXPECT_EQ(spec["serviceAccountName"].as<std::string>(),
            Find("deviceplugin/rbac.yaml", "ServiceAccount")["metadata"]["name"].as<std::string>());
  std::map<std::string, std::string> host_paths;  // volume → host path
  for (const YAML::Node& v : spec["volumes"]) {
    if (v["hostPath"]) host_paths[v["name"].as<std::string>()] = v["hostPath"]["path"].as<std::string>();
  }
  const YAML::Node container = spec["containers"][0];
  std::map<std::string, std::string> mounted;  // container path → host path
  for (const YAML::Node& m : container["volumeMounts"]) {
    auto it = host_paths.find(m["name"].as<std::string>());
    if (it != host_paths.end()) mounted[m["mountPath"].as<std::string>()] = it->second;
  }
  const std::string pod_resources_dir = config.device_plugin.pod_resources_socket.substr(
      0, config.device_plugin.pod_resources_socket.rfind('/'));
  EXPECT_EQ(mounted[config.device_plugin.device_plugin_dir], "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(mounted[pod_resources_dir], "/var/lib/kubelet/pod-resources");
  bool node_name = false;
  for (const YAML::Node& e : container["env"]) {
    node_name |= e["name"].as<std::string>() == "NODE_NAME" &&
                 e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>() == "spec.nodeName";
  }
  EXPECT_TRUE(node_name);
  EXPECT_EQ(container["args"][1].as<std::string>(), "/etc/mgpu/config.yaml");
}

TEST(DevicePluginDeploy, ClusterRoleGrantsExactlyWhatThePluginCalls) {
  std::map<std::string, std::set<std::string>> granted;  // resource → verbs
  for (const YAML::Node& rule : Find("deviceplugin/rbac.yaml", "ClusterRole")["rules"]) {
    for (const YAML::Node& r : rule["resources"]) {
      for (const YAML::Node& v : rule["verbs"]) granted[r.as<std::string>()].insert(v.as<std::string>());
    }
  }
  const std::map<std::string, std::set<std::string>> want = {
      {"pods", {"list", "watch", "patch"}},
      {"nodes", {"patch"}},
      {"events", {"create"}},
      // kube::WorkloadResolver, for the pod's shape
      {"replicasets", {"get"}},
      {"deployments", {"get"}},
      {"statefulsets", {"get"}},
      {"daemonsets", {"get"}},
      {"jobs", {"get"}},
      // at start, the node's DRA slices of an earlier mode (docs/dra.md §1)
      {"resourceslices", {"list", "delete"}}};
  EXPECT_EQ(granted, want);
  const YAML::Node binding = Find("deviceplugin/rbac.yaml", "ClusterRoleBinding");
  EXPECT_EQ(binding["subjects"][0]["name"].as<std::string>(), "mgpu-device-plugin");
  EXPECT_EQ(binding["subjects"][0]["namespace"].as<std::string>(),
            Find("base/namespace.yaml", "Namespace")["metadata"]["name"].as<std::string>());
}

}  // namespace
}  // namespace mgpu
