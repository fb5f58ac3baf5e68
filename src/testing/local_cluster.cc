#include "testing/local_cluster.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/allocator.h"
#include "common/codec.h"
#include "common/request.h"
#include "deviceplugin/daemon.h"
#include "extender/daemon.h"
#include "node/static_backend.h"
#include "testing/test_env.h"
#include "testing/workloads.h"

namespace mgpu::testing {
namespace {

using nlohmann::json;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr size_t kResources = 3;  // registrations per plugin: mgpu-core, mgpu-memory, reclaimed-mgpu-core

std::string AnnotationOf(const json& object, const std::string& key) {
  const Annotations annotations = AnnotationsOf(object);
  auto it = annotations.find(key);
  return it == annotations.end() ? "" : it->second;
}

std::set<std::string> SplitList(const std::string& text) {
  std::set<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.insert(item);
  return out;
}

// What a container's environment must say about one kind of amount, given its allocation.
Status CheckEnv(const std::string& who, const std::map<std::string, std::string>& envs, const char* variable,
                int64_t per_card) {
  auto it = envs.find(variable);
  if (per_card == 0) {
    if (it != envs.end())
      return Error{who + " has " + variable + "=" + it->second + " but its allocation gives none"};
    return Status::Ok();
  }
  if (it == envs.end() || it->second != std::to_string(per_card)) {
    return Error{who + " has " + variable + "=" + (it == envs.end() ? "(unset)" : it->second) +
                 " but its allocation gives " + std::to_string(per_card) + " per card"};
  }
  return Status::Ok();
}

// A container's shares as a comparable set.
std::set<std::tuple<std::string, int, int, int64_t>> Shares(const ContainerAssignment* container) {
  std::set<std::tuple<std::string, int, int, int64_t>> out;
  if (container)
    for (const CardShare& s : container->cards) out.insert({s.uuid, s.core, s.reclaimed_core, s.memory_mib});
  return out;
}

// What a running pod says it holds (DESIGN §5 step 4 as docs/design.md has it): its D/gpu-allocated, else,
// the kubelet having admitted it, its D/gpu-assignment. Empty when it has neither.
std::pair<std::string, std::string> HeldAnnotation(const json& pod, const ResourceNames& names) {
  for (const std::string& name : {names.gpu_allocated, names.gpu_assignment})
    if (std::string text = AnnotationOf(pod, name); !text.empty()) return {name, text};
  return {};
}

// The plugin has nothing left to write on an admitted pod: it carries D/gpu-allocated, or the cards its
// assignment names are the ones the kubelet gave each of its containers.
bool AllocationSettled(const json& pod, const AdmittedPod& admitted, const ResourceNames& names) {
  if (!AnnotationOf(pod, names.gpu_allocated).empty()) return true;
  Result<Assignment> assignment = DecodeAssignment(AnnotationOf(pod, names.gpu_assignment));
  if (!assignment.ok()) return false;
  for (const AdmittedContainer& container : admitted.containers) {
    auto env = container.admission.envs.find("MGPU_VISIBLE_CARDS");
    std::set<std::string> assigned;
    for (const auto& share : Shares(assignment->Find(container.name))) assigned.insert(std::get<0>(share));
    if (env == container.admission.envs.end() || SplitList(env->second) != assigned) return false;
  }
  return true;
}

}  // namespace

struct LocalCluster::NodeParts {
  LocalNode spec;
  Config config;  // the plugin's: its folder, socket and metrics port
  std::unique_ptr<FakeNode> kubelet;
  std::unique_ptr<dp::Daemon> plugin;
};

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

LocalCluster::~LocalCluster() { Stop(); }

std::map<std::string, std::string> LocalCluster::plugin_metrics_addresses() const {
  std::map<std::string, std::string> out;
  for (const auto& node : nodes_)
    if (node->plugin) out[node->spec.name] = "127.0.0.1:" + std::to_string(node->plugin->metrics_port());
  return out;
}

Status LocalCluster::Start() {
  if (Status s = api_.Start(); !s.ok()) return s;
  kubeconfig_path_ = options_.work_dir + "/kubeconfig";
  std::ofstream(kubeconfig_path_, std::ios::trunc) << api_.KubeconfigYaml();
  kube::ClusterConfig cluster;
  cluster.server = api_.url();
  Result<std::unique_ptr<kube::Client>> client = kube::Client::Create(cluster);
  if (!client.ok()) return Error{client.message()};
  client_ = std::move(*client);

  const ResourceNames names = options_.config.Names();
  const std::vector<std::string> managed = {names.core, names.memory, names.reclaimed_core};
  for (size_t i = 0; i < options_.nodes.size(); ++i) {
    const LocalNode& spec = options_.nodes[i];
    const json node = {{"apiVersion", "v1"},
                       {"kind", "Node"},
                       {"metadata",
                        {{"name", spec.name},
                         {"labels", {{"kubernetes.io/hostname", spec.name}, {"kubernetes.io/os", "linux"}}}}},
                       {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
    if (Result<json> created = api_.Create("nodes", node); !created.ok()) return Error{created.message()};
    auto parts = std::make_unique<NodeParts>();
    parts->spec = spec;
    parts->config = options_.config;
    parts->config.isolation.backend = IsolationBackend::kNone;  // a simulated node has no GPU to isolate
    const std::string dir = options_.work_dir + "/" + spec.name;
    std::error_code ec;
    std::filesystem::create_directories(dir + "/device-plugins", ec);
    if (ec) return Error{"cannot create " + dir + "/device-plugins: " + ec.message()};
    DevicePluginConfig& dp = parts->config.device_plugin;
    dp.node_name = spec.name;
    dp.device_plugin_dir = dir + "/device-plugins";
    dp.pod_resources_socket = dir + "/pod-resources.sock";
    dp.gpu_backend = "static";
    dp.metrics_address = "127.0.0.1:0";
    parts->kubelet = std::make_unique<FakeNode>(spec.name, dp.device_plugin_dir, dp.pod_resources_socket,
                                                *client_, managed, options_.seed + static_cast<uint32_t>(i));
    if (Status s = parts->kubelet->Start(); !s.ok()) return s;
    if (Status s = StartPlugin(*parts); !s.ok()) return s;
    nodes_.push_back(std::move(parts));
  }
  return StartExtender();
}

Status LocalCluster::StartPlugin(NodeParts& node) {
  node.plugin = std::make_unique<dp::Daemon>(node.config, node.spec.name,
                                             std::make_unique<node::StaticBackend>(node.spec.cards));
  kube::ClusterConfig cluster;
  cluster.server = api_.url();
  if (Status s = node.plugin->Start(cluster); !s.ok())
    return Error{"node " + node.spec.name + ": " + s.message()};
  const std::string inventory_key = options_.config.Names().gpu_inventory;
  const bool ready = WaitUntil(
      [&] {
        if (!node.plugin->Registered() || !node.plugin->Synced()) return false;
        std::optional<json> stored = api_.Get("nodes", "", node.spec.name);
        return stored && !AnnotationOf(*stored, inventory_key).empty();
      },
      kStartTimeout);
  if (!ready)
    return Error{"node " + node.spec.name +
                 ": the device plugin did not register, sync and publish its inventory"};
  // The kubelet admits nothing before it has the devices (nor would kube-scheduler place pods on a node whose
  // allocatable has none).
  const ResourceNames names = options_.config.Names();
  const auto has_devices = [](const std::map<std::string, std::string>& devices) { return !devices.empty(); };
  for (const std::string& resource : {names.core, names.memory, names.reclaimed_core}) {
    if (!node.kubelet->kubelet().WaitForLists(resource, has_devices, kStartTimeout))
      return Error{"node " + node.spec.name + ": the kubelet got no " + resource +
                   " devices from the plugin"};
  }
  return Status::Ok();
}

Status LocalCluster::StartExtender() {
  Config config = options_.config;
  config.extender.listen_address = "127.0.0.1:0";
  config.extender.leader_election = false;
  extender_ = std::make_unique<extender::Daemon>(config);
  kube::ClusterConfig cluster;
  cluster.server = api_.url();
  if (Status s = extender_->Start(cluster); !s.ok()) return Error{"extender: " + s.message()};
  const bool ready = WaitUntil(
      [&] {
        if (!extender_->Ready()) return false;
        std::shared_ptr<const ClusterView> view = extender_->cache().Snapshot();
        for (const auto& node : nodes_)
          if (!view->Find(node->spec.name)) return false;
        return true;
      },
      kStartTimeout);
  if (!ready) return Error{"the extender did not become ready with every node in its cache"};
  const ResourceNames names = config.Names();
  extender_url_ = "http://127.0.0.1:" + std::to_string(extender_->port());
  scheduler_ = std::make_unique<SchedulerDriver>(
      *client_, extender_url_, std::vector<std::string>{names.core, names.memory, names.reclaimed_core});
  return Status::Ok();
}

void LocalCluster::Stop() {
  scheduler_.reset();
  if (extender_) extender_->Stop();
  for (auto& node : nodes_) {
    if (node->plugin) node->plugin->Stop();
    node->kubelet->Stop();
  }
  extender_.reset();
  nodes_.clear();
  api_.Stop();
}

LocalCluster::NodeParts* LocalCluster::Find(const std::string& node) {
  for (auto& parts : nodes_)
    if (parts->spec.name == node) return parts.get();
  return nullptr;
}

Result<std::vector<std::string>> LocalCluster::Submit(std::string_view yaml_text) {
  return CreateWorkloads(api_, yaml_text, options_.config);
}

SchedulingOutcome LocalCluster::Schedule(const std::string& ns, const std::string& name) {
  std::optional<json> pod = api_.Get("pods", ns, name);
  if (!pod) return {"", "pod " + ns + "/" + name + " does not exist"};
  return scheduler_->Schedule(*pod);
}

std::map<std::string, SchedulingOutcome> LocalCluster::SchedulePending() {
  return scheduler_->SchedulePending();
}

bool LocalCluster::WaitSettled(std::chrono::milliseconds timeout) {
  const ResourceNames names = options_.config.Names();
  return WaitUntil(
      [&] {
        for (const auto& node : nodes_)
          if (node->kubelet->Waiting() > 0) return false;
        const std::map<std::string, AdmittedPod> admitted = Admitted();
        for (const json& pod : api_.List("pods")) {
          if (pod["spec"].value("nodeName", "").empty()) continue;
          const std::string phase = pod.value("status", json::object()).value("phase", "Pending");
          if (phase == "Pending") return false;
          auto it =
              admitted.find(kube::MetadataString(pod, "namespace") + "/" + kube::MetadataString(pod, "name"));
          if (phase == "Running" && it != admitted.end() && !it->second.containers.empty() &&
              !AllocationSettled(pod, it->second, names))
            return false;
        }
        return true;
      },
      timeout);
}

std::map<std::string, AdmittedPod> LocalCluster::Admitted() const {
  std::map<std::string, AdmittedPod> out;
  for (const auto& node : nodes_) out.merge(node->kubelet->Admitted());
  return out;
}

Status LocalCluster::CheckConsistency() const {
  const ResourceNames names = options_.config.Names();
  std::map<std::string, CardState> cards;  // by uuid: capacity, and usage summed below
  for (const LocalNode& node : options_.nodes) {
    NodeInventory inventory;
    inventory.cards = node.cards;
    inventory.memory_unit_mib = options_.config.memory_unit_mib;
    for (const CardState& card : MakeNodeState(node.name, inventory, options_.config).cards)
      cards[card.card.uuid] = card;
  }
  const std::map<std::string, AdmittedPod> admitted = Admitted();
  for (const auto& [key, pod] : admitted) {
    if (!pod.error.empty())
      return Error{"pod " + key + " was bound to " + pod.node + " but its kubelet rejected it: " + pod.error};
  }
  for (const json& pod : api_.List("pods")) {
    const std::string key = kube::MetadataString(pod, "namespace") + "/" + kube::MetadataString(pod, "name");
    if (pod.value("status", json::object()).value("phase", "") != "Running") continue;
    const auto [held_from, held_text] = HeldAnnotation(pod, names);
    auto it = admitted.find(key);
    const bool holds_devices = it != admitted.end() && !it->second.containers.empty();
    if (held_text.empty()) {
      if (holds_devices)
        return Error{"pod " + key + " holds devices but has neither " + names.gpu_allocated + " nor " +
                     names.gpu_assignment};
      continue;
    }
    Result<Assignment> allocated = DecodeAssignment(held_text);
    if (!allocated.ok()) return Error{"pod " + key + ": " + allocated.message()};
    if (!holds_devices) {
      if (held_from == names.gpu_assignment) continue;  // its containers asked for no device of the plugin's
      return Error{"pod " + key + " has " + names.gpu_allocated + " but its kubelet admitted no devices"};
    }
    if (allocated->containers.size() != it->second.containers.size())
      return Error{"pod " + key + ": " + held_from + " lists " +
                   std::to_string(allocated->containers.size()) + " containers, its kubelet admitted " +
                   std::to_string(it->second.containers.size())};
    const std::string assignment_text = AnnotationOf(pod, names.gpu_assignment);
    Result<Assignment> assignment = DecodeAssignment(assignment_text);
    for (const AdmittedContainer& container : it->second.containers) {
      const std::string who = "container " + key + "/" + container.name;
      const ContainerAssignment* mine = allocated->Find(container.name);
      if (!mine) return Error{who + " is missing from " + held_from};
      if (!assignment_text.empty() &&
          (!assignment.ok() || Shares(assignment->Find(container.name)) != Shares(mine)))
        return Error{who + " was allocated other cards than the extender assigned"};
      const auto& envs = container.admission.envs;
      if (!container.admission.env_conflicts.empty())
        return Error{who + " got conflicting values of " + container.admission.env_conflicts.front()};
      std::set<std::string> uuids;
      for (const CardShare& s : mine->cards) uuids.insert(s.uuid);
      for (const char* variable : {"MGPU_VISIBLE_CARDS", "NVIDIA_VISIBLE_DEVICES"}) {
        auto env = envs.find(variable);
        if (env == envs.end() || SplitList(env->second) != uuids)
          return Error{who + " sees cards " + (env == envs.end() ? "(unset)" : env->second) + " in " +
                       variable + " but its " + held_from + " names others"};
      }
      const CardShare& first = mine->cards.front();
      for (Status s : {CheckEnv(who, envs, "MGPU_CORE_PERCENT", first.core),
                       CheckEnv(who, envs, "MGPU_RECLAIMED_CORE_PERCENT", first.reclaimed_core),
                       CheckEnv(who, envs, "MGPU_MEMORY_MIB", first.memory_mib)}) {
        if (!s.ok()) return s;
      }
      for (const CardShare& s : mine->cards) {
        auto card = cards.find(s.uuid);
        if (card == cards.end()) return Error{who + " holds unknown card " + s.uuid};
        card->second.usage.core += s.core;
        card->second.usage.reclaimed_core += s.reclaimed_core;
        card->second.usage.memory_mib += s.memory_mib;
      }
    }
  }
  for (const auto& [uuid, card] : cards) {
    if (card.FreeCore() < 0 || card.FreeReclaimedCore() < 0 || card.FreeMemoryMiB() < 0) {
      return Error{"card " + uuid + " is over-committed: core " + std::to_string(card.usage.core) +
                   "/100, reclaimed " + std::to_string(card.usage.reclaimed_core) + "/100, memory " +
                   std::to_string(card.usage.memory_mib) + "/" + std::to_string(card.capacity_mib) + " MiB"};
    }
  }
  return Status::Ok();
}

Status LocalCluster::RestartOnNode(const std::string& node,
                                   const std::function<Status(NodeParts&)>& restart) {
  NodeParts* parts = Find(node);
  if (!parts) return Error{"no node " + node};
  auto hold = parts->kubelet->HoldAdmissions();
  const size_t registrations = parts->kubelet->kubelet().Registrations().size();
  if (Status s = restart(*parts); !s.ok()) return s;
  if (!parts->kubelet->kubelet().WaitForRegistrations(registrations + kResources, kStartTimeout))
    return Error{"node " + node + ": the plugin did not register its resources with the kubelet again"};
  return Status::Ok();
}

Status LocalCluster::RestartPlugin(const std::string& node) {
  return RestartOnNode(node, [this](NodeParts& parts) {
    parts.plugin->Stop();
    parts.plugin.reset();
    return StartPlugin(parts);
  });
}

Status LocalCluster::RestartKubelet(const std::string& node) {
  return RestartOnNode(node, [](NodeParts& parts) { return parts.kubelet->kubelet().Restart(); });
}

Status LocalCluster::RestartExtender() {
  scheduler_.reset();
  extender_->Stop();
  extender_.reset();
  return StartExtender();
}

}  // namespace mgpu::testing
