// A whole mgpu cluster in one process, for the demo (scripts/run.sh) and the end-to-end tests: the fake API
// server; the scheduler extender (its Daemon, on a free port); per node a Node object, a device plugin (its
// Daemon over static cards, with its own folder, sockets and metrics port) and a FakeNode (the kubelet); and
// a SchedulerDriver standing in for kube-scheduler. Every part talks to the others over its real wire: HTTP
// to the API server and to the extender, gRPC on unix sockets between the plugins and the kubelets. Any
// daemon and kubelet can be restarted in the middle.
// What it still exists for, now that tests/realcluster/ runs mgpu deployed from deploy/ on a real cluster:
// the demo, and end-to-end tests that need several nodes with GPUs of different models, restarts at exact
// points between two kubelet calls, and any machine (no Kubernetes binaries, no root, a few seconds).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/kube/client.h"
#include "common/model.h"
#include "common/result.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_node.h"
#include "testing/scheduler_driver.h"

namespace mgpu::dp {
class Daemon;
}
namespace mgpu::extender {
class Daemon;
}

namespace mgpu::testing {

struct LocalNode {
  std::string name;
  std::vector<Card> cards;
};

struct LocalClusterOptions {
  Config config;  // both daemons'; listen addresses, folders and sockets are set per part
  std::vector<LocalNode> nodes;
  std::string work_dir;  // an existing folder for the nodes' sockets and the kubeconfig (short: unix sockets)
  uint32_t seed = 1;     // the kubelets' order of resources within a container
};

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);
  ~LocalCluster();

  // Starts every part, then waits (bounded) until each node's inventory is published and its plugin
  // registered and synced, and the extender is ready with every node in its cache.
  Status Start();
  void Stop();

  FakeApiServer& api() { return api_; }
  kube::Client& client() { return *client_; }
  const Config& config() const { return options_.config; }
  const std::vector<LocalNode>& nodes() const { return options_.nodes; }
  // A kubeconfig file for the API server (for kubectl-mgpu and kubectl).
  const std::string& kubeconfig_path() const { return kubeconfig_path_; }
  // The extender's urlPrefix ("http://127.0.0.1:<port>"); it changes when the extender restarts.
  const std::string& extender_url() const { return extender_url_; }
  // Each node's device plugin metrics address ("127.0.0.1:<port>"), by node name.
  std::map<std::string, std::string> plugin_metrics_addresses() const;

  // Creates the workloads of a YAML stream and their pods (testing/workloads.h); the pods' keys.
  Result<std::vector<std::string>> Submit(std::string_view yaml_text);
  // One scheduling cycle of one pod, or of every pending pod (testing/scheduler_driver.h).
  SchedulingOutcome Schedule(const std::string& ns, const std::string& name);
  std::map<std::string, SchedulingOutcome> SchedulePending();

  // Waits until every pod bound to a node has been admitted or rejected by its kubelet, and every admitted
  // pod that holds devices carries D/gpu-allocated or got exactly the cards of its D/gpu-assignment (the
  // plugin writes gpu-allocated only where they differ). False on timeout.
  bool WaitSettled(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // What the kubelets admitted, over every node, by "namespace/name".
  std::map<std::string, AdmittedPod> Admitted() const;
  // The hand-off held: no kubelet rejected a pod bound to it; every admitted container's environment agrees
  // with what its pod says it holds, D/gpu-allocated or else D/gpu-assignment (cards, core, reclaimed core
  // and memory per card), and that with the extender's D/gpu-assignment; and no card holds more than 100 %
  // online core, 100 % reclaimed core or its memory capacity. The first violation, as a sentence.
  Status CheckConsistency() const;

  // Restarts (stop, start again, wait until registered and synced) one part in the middle of things.
  Status RestartPlugin(const std::string& node);
  Status RestartKubelet(const std::string& node);
  Status RestartExtender();

 private:
  struct NodeParts;
  Status StartPlugin(NodeParts& node);
  Status StartExtender();
  NodeParts* Find(const std::string& node);
  // Runs `restart` on one node with its kubelet's admissions held, then waits until the plugin has registered
  // its resources with the kubelet again.
  Status RestartOnNode(const std::string& node, const std::function<Status(NodeParts&)>& restart);

  LocalClusterOptions options_;
  FakeApiServer api_;
  std::unique_ptr<kube::Client> client_;
  std::string kubeconfig_path_;
  std::string extender_url_;
  std::unique_ptr<extender::Daemon> extender_;
  std::unique_ptr<SchedulerDriver> scheduler_;
  std::vector<std::unique_ptr<NodeParts>> nodes_;
};

}  // namespace mgpu::testing
