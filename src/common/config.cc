#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <set>

#include "common/dra.h"
#include "common/file.h"

namespace mgpu {

ResourceNames::ResourceNames(std::string_view domain) {
  const std::string d(domain);
  core = d + "/mgpu-core";
  memory = d + "/mgpu-memory";
  reclaimed_core = d + "/reclaimed-mgpu-core";
  compute_policy = d + "/mgpu-compute-policy";
  gpu_count = d + "/gpu-count";
  gpu_policy = d + "/gpu-policy";
  node_policy = d + "/node-policy";
  gpu_assignment = d + "/gpu-assignment";
  gpu_assume_time = d + "/gpu-assume-time";
  gpu_allocated = d + "/gpu-allocated";
  gpu_inventory = d + "/gpu-inventory";
  memory_as_written = d + "/mgpu-memory-mib";
  gpu_dra_inventory = d + "/gpu-dra-inventory";
  dra_limits = d + "/dra-limits";
  dra_resource = d + "/dra-gpu";
  label_product = d + "/gpu.product";
  label_count = d + "/gpu.count";
  label_memory = d + "/gpu.memory";
}

namespace {

// Reads one YAML mapping, remembering which keys were read so the rest can be reported as unknown.
// Errors collect in `error` (first one wins); readers stop reading once one is set.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, std::string& error)
      : node_(node), path_(std::move(path)), error_(error) {
    if (node_ && !node_.IsNull() && !node_.IsMap())
      Fail(path_.empty() ? "the file" : path_, "must be a mapping");
  }

  void String(const char* key, std::string& out) {
    Scalar(key, [&](const YAML::Node& n, const std::string&) {
      out = n.as<std::string>();
      return true;
    });
  }

  void Int(const char* key, int64_t& out, int64_t min, int64_t max) {
    Scalar(key, [&](const YAML::Node& n, const std::string& where) {
      int64_t v = 0;
      if (!YAML::convert<int64_t>::decode(n, v))
        return Fail(where, "must be a whole number, got \"" + n.Scalar() + "\"");
      if (v < min || v > max) {
        return Fail(where, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                               ", got " + std::to_string(v));
      }
      out = v;
      return true;
    });
  }

  void Int(const char* key, int& out, int min, int max) {
    int64_t v = out;
    Int(key, v, min, max);
    out = static_cast<int>(v);
  }

  void Bool(const char* key, bool& out) {
    Scalar(key, [&](const YAML::Node& n, const std::string& where) {
      bool v = false;
      if (!YAML::convert<bool>::decode(n, v))
        return Fail(where, "must be true or false, got \"" + n.Scalar() + "\"");
      out = v;
      return true;
    });
  }

  // A scalar that one of the names `parse` knows; `choices` lists them for the message.
  template <typename E>
  void Enum(const char* key, E& out, std::optional<E> (*parse)(std::string_view), const char* choices) {
    Scalar(key, [&](const YAML::Node& n, const std::string& where) {
      auto v = parse(n.Scalar());
      if (!v) return Fail(where, std::string("must be one of ") + choices + ", got \"" + n.Scalar() + "\"");
      out = *v;
      return true;
    });
  }

  void Map(const char* key, const std::function<void(MapReader&)>& read) {
    if (!error_.empty()) return;
    known_.insert(key);
    MapReader sub(node_ ? node_[key] : YAML::Node(), Join(key), error_);
    if (!error_.empty()) return;
    read(sub);
    sub.RejectUnknown();
  }

  void RejectUnknown() {
    if (!error_.empty() || !node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) {  // a YAML complex key ("? {a: 1}") names nothing
        Fail(path_.empty() ? "the top level" : path_, "has a key that is not a plain name");
        return;
      }
      const std::string key = kv.first.as<std::string>();
      if (!known_.count(key)) Fail(Join(key), "is not a known key");
    }
  }

 private:
  std::string Join(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  bool Fail(const std::string& where, const std::string& what) {
    if (error_.empty()) error_ = where + " " + what;
    return false;
  }

  void Scalar(const char* key, const std::function<bool(const YAML::Node&, const std::string&)>& read) {
    known_.insert(key);
    if (!error_.empty() || !node_ || !node_.IsMap()) return;
    const YAML::Node n = node_[key];
    if (!n || n.IsNull()) return;  // absent: keep the default
    if (!n.IsScalar()) {
      Fail(Join(key), "must be a single value");
      return;
    }
    read(n, Join(key));
  }

  YAML::Node node_;
  std::string path_;
  std::string& error_;
  std::set<std::string> known_;
};

// The mgpu backend's paths end up in containers' mounts and in /etc/ld.so.preload: absolute, one line.
std::string CheckIsolation(const IsolationConfig& iso) {
  if (iso.backend != IsolationBackend::kMgpu) return "";
  const auto bad = [](const std::string& path) {
    return path.empty() || path[0] != '/' || path.find_first_of("\n\r :") != std::string::npos ||
           path.back() == '/';
  };
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"guardLibraryPath", iso.guard_library_path},
        {"guardStateDirectory", iso.guard_state_directory}}) {
    if (bad(path))
      return std::string("isolation.") + key +
             " must be an absolute path with no spaces or colons and no trailing "
             "slash, got \"" +
             path + "\"";
  }
  if (!iso.guard_library_source.empty() && iso.guard_library_source[0] != '/')
    return "isolation.guardLibrarySource must be an absolute path or empty, got \"" +
           iso.guard_library_source + "\"";
  return "";
}

}  // namespace

Result<Config> ParseConfig(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Error{std::string(source) + ": not valid YAML: " + e.what()};
  }
  Config c;
  std::string error;
  MapReader r(root, "", error);
  r.String("resourceDomain", c.resource_domain);
  r.Int("memoryUnitMiB", c.memory_unit_mib, 1, 1 << 20);
  r.Int("reservedMemoryMiB", c.reserved_memory_mib, 0, int64_t{1} << 40);
  r.Int("minCorePercent", c.min_core_percent, 1, 100);
  r.Enum("defaultComputePolicy", c.default_compute_policy, ParseComputePolicy,
         "fixed-share, guaranteed-burst-share, native-burst-share");
  r.Enum("cardPolicy", c.default_card_policy, ParseCardPolicy, "binpack, spread, fragmentation");
  r.Enum("nodePolicy", c.default_node_policy, ParseNodePolicy, "binpack, spread, fragmentation");
  r.Map("isolation", [&](MapReader& m) {
    m.Enum("backend", c.isolation.backend, ParseIsolationBackend, "mgpu, none, hami-core, mps");
    m.String("hamiLibraryPath", c.isolation.hami_library_path);
    m.String("mpsPipeDirectory", c.isolation.mps_pipe_directory);
    m.String("guardLibraryPath", c.isolation.guard_library_path);
    m.String("guardStateDirectory", c.isolation.guard_state_directory);
    m.String("guardLibrarySource", c.isolation.guard_library_source);
  });
  r.Map("devicePlugin", [&](MapReader& m) {
    auto& p = c.device_plugin;
    m.Enum("mode", p.mode, ParseNodeMode, "device-plugin, dra");
    m.String("nodeName", p.node_name);
    m.String("devicePluginDir", p.device_plugin_dir);
    m.String("podResourcesSocket", p.pod_resources_socket);
    m.String("gpuBackend", p.gpu_backend);
    m.String("staticInventoryFile", p.static_inventory_file);
    m.String("metricsAddress", p.metrics_address);
    m.Int("podResourcesPollMs", p.pod_resources_poll_ms, 10, 600000);
    m.Int("pendingPodWaitMs", p.pending_pod_wait_ms, 0, 600000);
    m.Int("nodeHeartbeatSeconds", p.node_heartbeat_seconds, 1, 86400);
  });
  r.Map("dra", [&](MapReader& m) {
    m.String("kubeletRootDir", c.dra.kubelet_root_dir);
    m.String("cdiDirectory", c.dra.cdi_directory);
    m.String("stateDirectory", c.dra.state_directory);
    m.String("deviceRoot", c.dra.device_root);
    m.String("cards", c.dra.cards);
    m.String("schedulerName", c.dra.scheduler_name);
  });
  r.Map("extender", [&](MapReader& m) {
    auto& e = c.extender;
    m.String("listenAddress", e.listen_address);
    m.Int("assignmentTTLSeconds", e.assignment_ttl_seconds, 1, 86400 * 7);
    m.Int("bindWaitMs", e.bind_wait_ms, 0, 600000);
    m.Int("maxBodyBytes", e.max_body_bytes, 1024, int64_t{1} << 32);
    m.Int("httpWorkers", e.http_workers, 2, 4096);
    m.Int("httpRequestTimeoutMs", e.http_request_timeout_ms, 100, 600000);
    m.Int("httpConnectionsPerClient", e.http_connections_per_client, 1, 4096);
    m.Int("maxPods", e.max_pods, 1, int64_t{1} << 32);
    m.Int("eventsPerSecond", e.events_per_second, 0, 100000);
    m.Bool("leaderElection", e.leader_election);
    m.String("leaseNamespace", e.lease_namespace);
    m.String("leaseName", e.lease_name);
    m.Int("leaseDurationSeconds", e.lease_duration_seconds, 2, 3600);
    m.String("tlsCertFile", e.tls_cert_file);
    m.String("tlsKeyFile", e.tls_key_file);
  });
  r.RejectUnknown();
  if (error.empty() && c.resource_domain.empty()) error = "resourceDomain must not be empty";
  if (error.empty() && c.device_plugin.gpu_backend != "nvml" && c.device_plugin.gpu_backend != "static") {
    error =
        "devicePlugin.gpuBackend must be one of nvml, static, got \"" + c.device_plugin.gpu_backend + "\"";
  }
  if (error.empty() && c.device_plugin.gpu_backend == "static" &&
      c.device_plugin.static_inventory_file.empty()) {
    error = "devicePlugin.staticInventoryFile is required when devicePlugin.gpuBackend is static";
  }
  if (error.empty() && c.extender.http_connections_per_client >= c.extender.http_workers) {
    error = "extender.httpConnectionsPerClient (" + std::to_string(c.extender.http_connections_per_client) +
            ") must be below extender.httpWorkers (" + std::to_string(c.extender.http_workers) +
            "), so that one client never holds every worker";
  }
  if (error.empty()) error = CheckIsolation(c.isolation);
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"kubeletRootDir", c.dra.kubelet_root_dir},
        {"cdiDirectory", c.dra.cdi_directory},
        {"stateDirectory", c.dra.state_directory},
        {"deviceRoot", c.dra.device_root}}) {
    if (error.empty() && (path.empty() || path[0] != '/'))
      error = std::string("dra.") + key + " must be an absolute path, got \"" + path + "\"";
  }
  if (error.empty() && c.dra.cards != "any" && !dra::ParseVariant(c.dra.cards)) {
    error = "dra.cards must be one of " + dra::CardsValues() + ", got \"" + c.dra.cards + "\"";
  }
  if (!error.empty()) return Error{std::string(source) + ": " + error};
  return c;
}

Result<Config> LoadConfigFile(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return Error{"cannot read config file " + path};
  return ParseConfig(*text, path);
}

std::string_view Name(NodeMode mode) { return mode == NodeMode::kDra ? "dra" : "device-plugin"; }

std::optional<NodeMode> ParseNodeMode(std::string_view text) {
  if (text == "device-plugin") return NodeMode::kDevicePlugin;
  if (text == "dra") return NodeMode::kDra;
  return std::nullopt;
}

std::string_view ShortName(Resource resource) {
  switch (resource) {
    case Resource::kCore:
      return "mgpu-core";
    case Resource::kMemory:
      return "mgpu-memory";
    case Resource::kReclaimedCore:
      return "reclaimed-mgpu-core";
  }
  return "unknown";
}

std::string FullName(Resource resource, const ResourceNames& names) {
  switch (resource) {
    case Resource::kCore:
      return names.core;
    case Resource::kMemory:
      return names.memory;
    case Resource::kReclaimedCore:
      return names.reclaimed_core;
  }
  return {};
}

Result<HostPort> ParseHostPort(std::string_view address, std::string_view what) {
  const size_t colon = address.rfind(':');
  const auto bad = [&](const char* why) {
    return Error{std::string(what) + " \"" + std::string(address) + "\" " + why};
  };
  if (colon == std::string_view::npos) return bad("is not host:port");
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.find(':') != std::string_view::npos && address.front() != '[')
    return bad("has an IPv6 host without brackets; write [host]:port");
  const std::string_view digits = address.substr(colon + 1);
  int port = 0;
  if (digits.empty() || digits.size() > 5) return bad("has no port number");
  for (char c : digits) {
    if (c < '0' || c > '9') return bad("has no port number");
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return bad("has a port above 65535");
  return HostPort{std::string(host), port};
}

}  // namespace mgpu
