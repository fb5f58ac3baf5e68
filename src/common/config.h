// The one configuration file of both daemons (YAML). Every key has a default, so an empty file is a valid
// config; an unknown key or a bad value is rejected with the key's path in the message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/model.h"
#include "common/result.h"

namespace mgpu {

// Extended-resource and annotation names under the configured domain D.
struct ResourceNames {
  std::string core;             // D/mgpu-core
  std::string memory;           // D/mgpu-memory
  std::string reclaimed_core;   // D/reclaimed-mgpu-core
  std::string compute_policy;   // D/mgpu-compute-policy
  std::string gpu_count;        // D/gpu-count
  std::string gpu_policy;       // D/gpu-policy
  std::string node_policy;      // D/node-policy
  std::string gpu_assignment;   // D/gpu-assignment
  std::string gpu_assume_time;  // D/gpu-assume-time
  std::string gpu_allocated;    // D/gpu-allocated
  std::string gpu_inventory;    // D/gpu-inventory
  // A pod's mgpu-memory as its author wrote it, in MiB, per container: set by the admission webhook when it
  // rewrote the limits into memoryUnitMiB devices (request.h, MemoryUnitsPatch).
  std::string memory_as_written;  // D/mgpu-memory-mib
  // The DRA mode (docs/dra.md §7): a DRA node's cards, a DRA pod's mgpu limits as the webhook replaced them,
  // and the extended resource that routes a DRA pod through the extender's verbs (no node advertises it).
  std::string gpu_dra_inventory;  // D/gpu-dra-inventory
  std::string dra_limits;         // D/dra-limits
  std::string dra_resource;       // D/dra-gpu
  std::string label_product;    // D/gpu.product
  std::string label_count;      // D/gpu.count
  std::string label_memory;     // D/gpu.memory

  explicit ResourceNames(std::string_view domain);
};

// The three extended resources of DESIGN §2 (the device plugin serves one device list for each).
enum class Resource { kCore, kMemory, kReclaimedCore };
inline constexpr Resource kAllResources[] = {Resource::kCore, Resource::kMemory, Resource::kReclaimedCore};

// "mgpu-core", "mgpu-memory", "reclaimed-mgpu-core": the resource name without its domain.
std::string_view ShortName(Resource resource);
// The full extended-resource name under the configured domain, e.g. "mgpu.io/mgpu-core".
std::string FullName(Resource resource, const ResourceNames& names);

inline constexpr std::string_view kQosLevelAnnotation = "katalyst.kubewharf.io/qos_level";

struct IsolationConfig {
  IsolationBackend backend = IsolationBackend::kMgpu;
  std::string hami_library_path = "/usr/local/vgpu/libvgpu.so";  // host path of libvgpu.so
  std::string mps_pipe_directory = "/tmp/nvidia-mps";            // host path of the MPS pipe directory
  // mgpu: host path of libmgpu-guard.so (the ld.so.preload that names it lies beside it), the host folder of
  // the per-card state directories, and the library in the plugin's image that the plugin installs at
  // guard_library_path when it starts (empty: the operator installs it).
  std::string guard_library_path = "/var/lib/mgpu/lib/libmgpu-guard.so";
  std::string guard_state_directory = "/var/lib/mgpu/cards";
  std::string guard_library_source = "/usr/local/lib/mgpu/libmgpu-guard.so";
};

// How the node daemon serves the node's cards: through the kubelet's device-plugin API (DESIGN.md) or as a
// DRA driver (docs/dra.md). A node serves its cards one way only.
enum class NodeMode { kDevicePlugin, kDra };
std::string_view Name(NodeMode mode);
std::optional<NodeMode> ParseNodeMode(std::string_view text);

struct DevicePluginConfig {
  NodeMode mode = NodeMode::kDevicePlugin;
  std::string node_name;  // empty: from NODE_NAME in the environment
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string gpu_backend = "nvml";   // nvml | static
  std::string static_inventory_file;  // YAML list of cards, for gpu_backend: static
  std::string metrics_address = "0.0.0.0:9400";
  int pod_resources_poll_ms = 1000;
  int pending_pod_wait_ms = 5000;   // bounded wait for the pod a kubelet call belongs to
  int node_heartbeat_seconds = 60;  // how often the node's inventory annotation is refreshed
};

// The DRA mode's node side (docs/dra.md §1).
struct DraConfig {
  std::string kubelet_root_dir = "/var/lib/kubelet";  // plugins_registry/ and plugins/<driver>/ under it
  std::string cdi_directory = "/var/run/cdi";         // where containerd reads CDI specs
  std::string state_directory = "/var/lib/mgpu/dra";  // the prepared claims' checkpoint
  std::string device_root = "/dev";                   // where the host's device nodes are seen
  // How each card is published (docs/dra.md §2): one kind ("fixed", the default and the shipped
  // defaultComputePolicy's; "fixed-online", "guaranteed", "guaranteed-online", "native", "whole"): one device
  // per card, no counters, as fast for the scheduler as a bare driver at any scale; or "any" (opt-in, small
  // clusters): six devices, one per kind of share, holding one shared counter, so that the scheduler gives a
  // card whichever kind comes first (kube-scheduler v1.36's cost of counters grows with the square of the
  // nodes).
  std::string cards = "fixed";
  // The kube-scheduler profile the webhooks give the pods they send to the extender as DRA pods, where their
  // spec.schedulerName is the default's: deploy/extender/scheduler-config.yaml's profile for DRA pods, which
  // samples fewer nodes (docs/dra.md §7). Empty: their schedulerName is left as written.
  std::string scheduler_name = "mgpu-dra";
};

struct ExtenderConfig {
  std::string listen_address = "0.0.0.0:12345";
  int64_t assignment_ttl_seconds = 300;  // an assignment unallocated for longer stops counting
  int64_t bind_wait_ms = 3000;  // ambiguity guard: how long a bind waits for an earlier one (under the
                                // scheduler's 5 s default extender timeout)
  int64_t max_body_bytes = 64 << 20;
  // The HTTP server's bounds (common/http_server.h). kube-scheduler binds asynchronously, one goroutine per
  // pod: enough workers that a bind waiting out the ambiguity guard never queues the others, and a client
  // (kube-scheduler too) never holds the last 32 of them.
  int64_t http_workers = 128;
  int64_t http_request_timeout_ms = 10000;
  int64_t http_connections_per_client = 96;
  // The pods the informer keeps (every pod of the cluster, ~2.5 KB each): past it the extender is not ready
  // rather than blind to some. Kubernetes is tested to 150,000 pods.
  int64_t max_pods = 300000;
  // GPUAssigned events created per second on average (bursts of ten times as many); the others are skipped,
  // counted and said in the bind's log line. Each event is one API write: a burst of pods must not pay one
  // each. 0: an event for every pod.
  int64_t events_per_second = 20;
  bool leader_election = false;
  std::string lease_namespace = "kube-system";
  std::string lease_name = "mgpu-scheduler-extender";
  int lease_duration_seconds = 15;
  std::string tls_cert_file;
  std::string tls_key_file;
};

struct Config {
  std::string resource_domain = "mgpu.io";
  int64_t memory_unit_mib = 1;
  int64_t reserved_memory_mib = 0;
  int min_core_percent = 5;
  ComputePolicy default_compute_policy = ComputePolicy::kFixedShare;
  CardPolicy default_card_policy = CardPolicy::kFragmentation;
  NodePolicy default_node_policy = NodePolicy::kFragmentation;
  IsolationConfig isolation;
  DevicePluginConfig device_plugin;
  DraConfig dra;
  ExtenderConfig extender;

  ResourceNames Names() const { return ResourceNames(resource_domain); }
};

// Parses YAML text; `source` names it in error messages.
Result<Config> ParseConfig(std::string_view yaml_text, std::string_view source = "config");
Result<Config> LoadConfigFile(const std::string& path);

// A listen address of the config ("host:port", "[::1]:port" for IPv6, ":port" for every interface), with the
// brackets taken off the host. `what` names the key in the one-sentence error.
struct HostPort {
  std::string host;
  int port = 0;
};
Result<HostPort> ParseHostPort(std::string_view address, std::string_view what);

}  // namespace mgpu
