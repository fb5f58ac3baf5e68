// Test-only builders of the Node and Pod objects the cluster cache and the extender read (shared by the unit
// and integration tests).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "common/config.h"
#include "common/model.h"
#include "common/node_facts.h"
#include "common/pod_facts.h"

namespace mgpu::testobj {

// A node with `cards` cards of `memory_mib` each, named "<node>-gpu<i>".
inline nlohmann::json Node(const std::string& name, int cards, int64_t memory_mib = 16384,
                           const std::string& model = "Test GPU") {
  NodeInventory inventory;
  for (int i = 0; i < cards; ++i)
    inventory.cards.push_back(Card{i, name + "-gpu" + std::to_string(i), model, memory_mib, true});
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", name}, {"annotations", {{Config().Names().gpu_inventory, EncodeInventory(inventory)}}}}}};
}

// A pod with one container "c" asking for `core`% and `memory_mib` MiB (online).
inline nlohmann::json Pod(const std::string& name, int core, int64_t memory_mib,
                          const std::string& uid = "") {
  const ResourceNames names = Config().Names();
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", uid.empty() ? "uid-" + name : uid}}},
      {"spec",
       {{"containers",
         {{{"name", "c"},
           {"image", "x"},
           {"resources",
            {{"limits",
              {{names.core, std::to_string(core)}, {names.memory, std::to_string(memory_mib)}}}}}}}}}},
      {"status", {{"phase", "Pending"}}}};
}

inline Assignment OneCard(const std::string& uuid, int core, int64_t memory_mib) {
  return Assignment{{ContainerAssignment{"c", {CardShare{uuid, core, 0, memory_mib}}}}};
}

// `pod` bound to `node` with `annotation` (gpu-assignment or gpu-allocated) set to `assignment`, its kubelet
// not yet reporting on it (Pending, no hostIP: with only an assignment, it waits for admission).
inline nlohmann::json Placed(nlohmann::json pod, const std::string& node, const std::string& annotation,
                             const Assignment& assignment, int64_t assume_ns = 0) {
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Pending";
  pod["metadata"]["annotations"][annotation] = EncodeAssignment(assignment);
  if (assume_ns)
    pod["metadata"]["annotations"][Config().Names().gpu_assume_time] = EncodeAssumeTime(assume_ns);
  return pod;
}

// Node(...) as the DRA driver publishes it: its cards in D/gpu-dra-inventory, not D/gpu-inventory.
inline nlohmann::json DraNode(const std::string& name, int cards, int64_t memory_mib = 16384) {
  const ResourceNames names = Config().Names();
  nlohmann::json node = Node(name, cards, memory_mib);
  nlohmann::json& annotations = node["metadata"]["annotations"];
  annotations[names.gpu_dra_inventory] = annotations[names.gpu_inventory];
  annotations.erase(names.gpu_inventory);
  return node;
}

// Pod(...) as the webhook's /mutate leaves its container "c" (docs/dra.md §7), its claims left out: the mgpu
// limits moved into D/dra-limits, one D/dra-gpu in their place.
inline nlohmann::json DraPod(nlohmann::json pod) {
  const ResourceNames names = Config().Names();
  nlohmann::json& limits = pod["spec"]["containers"][0]["resources"]["limits"];
  pod["metadata"]["annotations"][names.dra_limits] = nlohmann::json{{"c", limits}}.dump();
  limits = {{names.dra_resource, "1"}};
  return pod;
}

// The facts a cache of cards takes, read as an informer's edge reads them (default config, no workload).
inline PodFacts PodOf(const nlohmann::json& pod) { return ReadPod(pod, Config()); }
inline NodeFacts NodeOf(const nlohmann::json& node) { return ReadNode(node, Config()); }

}  // namespace mgpu::testobj

// ResourceClaim objects as kube-scheduler leaves them allocated (the DRA mode's tests).
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

}  // namespace mgpu::dra::test
