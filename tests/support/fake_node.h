// One simulated node's kubelet, for the demo and the end-to-end tests. The device-plugin side is FakeKubelet
// (Registration, ListAndWatch, GetPreferredAllocation and Allocate, PodResources); this adds the pod side: it
// watches the pods bound to the node and admits them one at a time, as the kubelet does, container by
// container (init containers first) through GetPreferredAllocation and Allocate of every managed resource the
// container asks for, then marks the pod Running, or Failed with reason UnexpectedAdmissionError and the
// plugin's error (its devices released). A deleted pod's devices are released. What was admitted survives
// kubelet().Restart(), as the kubelet's checkpoint does.
// What it still exists for, now that tests/realcluster/ runs the real kubelet and containerd: many nodes in
// one process (a machine runs one real kubelet), admissions in a chosen order, and no root or binaries.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/kube/client.h"
#include "common/kube/informer.h"
#include "support/fake_kubelet.h"

namespace mgpu::testing {

struct AdmittedContainer {
  std::string name;
  test::FakeKubelet::Admission admission;  // devices and the merged environment
};

struct AdmittedPod {
  std::string node;
  std::string error;                          // why admission failed; empty when admitted
  std::vector<AdmittedContainer> containers;  // those that asked for a managed resource
};

class FakeNode {
 public:
  // `managed`: the resource names admitted through the device plugin (the plugin's three resources).
  FakeNode(std::string name, std::string device_plugin_dir, std::string pod_resources_socket,
           kube::Client& client, std::vector<std::string> managed, uint32_t seed);
  ~FakeNode();

  // Starts the kubelet's servers, then the pod watch and the admission thread.
  Status Start();
  void Stop();

  // Holds admissions for as long as the lock is held: over a device plugin or kubelet restart, while the real
  // kubelet would fail the pods it admits.
  std::unique_lock<std::mutex> HoldAdmissions() { return std::unique_lock(admission_mu_); }

  const std::string& name() const { return name_; }
  test::FakeKubelet& kubelet() { return kubelet_; }
  // Every pod admitted (or rejected) so far, by "namespace/name".
  std::map<std::string, AdmittedPod> Admitted() const;
  // Pods bound here that are not admitted or rejected yet.
  size_t Waiting() const;

 private:
  void Offer(const kube::Json& pod);
  void Forget(const kube::Json& pod);
  void Run();
  AdmittedPod Admit(const kube::Json& pod);

  const std::string name_;
  kube::Client& client_;
  const std::vector<std::string> managed_;
  test::FakeKubelet kubelet_;
  std::mt19937 rng_;
  std::unique_ptr<kube::Informer> pods_;
  std::thread worker_;
  std::mutex admission_mu_;  // held while a pod is admitted or released

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool busy_ = false;  // a pod is being admitted
  std::deque<kube::Json> queue_;
  std::set<std::string> seen_;  // uids queued or admitted
  std::map<std::string, AdmittedPod> admitted_;
};

}  // namespace mgpu::testing
