#include "common/kube/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "common/file.h"

namespace mgpu::kube {
namespace {

namespace fs = std::filesystem;

Result<std::string> DecodeBase64(const std::string& text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+' || c == '-')
      v = 62;
    else if (c == '/' || c == '_')
      v = 63;
    else if (c == '=' || c == '\n' || c == '\r' || c == ' ')
      continue;
    else
      return Error{"invalid base64 data"};
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

// A named cluster, user or context entry, with the directory of the file it came from.
struct Entry {
  YAML::Node node;
  std::string base_dir;
};

// The merged view of one or more kubeconfig documents: the first definition of a name wins.
struct Merged {
  std::map<std::string, Entry> clusters, users, contexts;
  std::string current_context;
};

Status MergeDocument(const std::string& yaml_text, const std::string& base_dir, Merged& merged) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Error{std::string("kubeconfig is not valid YAML: ") + e.what()};
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return Error{"kubeconfig is not a YAML mapping"};
  auto merge_list = [&](const char* list_key, const char* item_key,
                        std::map<std::string, Entry>& into) -> Status {
    YAML::Node list = root[list_key];
    if (!list || list.IsNull()) return Status::Ok();
    if (!list.IsSequence()) return Error{std::string("kubeconfig field ") + list_key + " is not a list"};
    for (const auto& item : list) {
      if (!item.IsMap() || !item["name"] || !item["name"].IsScalar()) {
        return Error{std::string("kubeconfig has an entry in ") + list_key + " without a name"};
      }
      std::string name = item["name"].as<std::string>();
      YAML::Node body = item[item_key];
      if (body && !body.IsNull() && !body.IsMap()) {
        return Error{"kubeconfig entry " + name + " in " + list_key + " is not a mapping"};
      }
      into.try_emplace(name, Entry{body ? body : YAML::Node(YAML::NodeType::Map), base_dir});
    }
    return Status::Ok();
  };
  if (Status s = merge_list("clusters", "cluster", merged.clusters); !s) return s;
  if (Status s = merge_list("users", "user", merged.users); !s) return s;
  if (Status s = merge_list("contexts", "context", merged.contexts); !s) return s;
  if (merged.current_context.empty() && root["current-context"] && root["current-context"].IsScalar()) {
    merged.current_context = root["current-context"].as<std::string>();
  }
  return Status::Ok();
}

std::string Scalar(const YAML::Node& map, const char* key) {
  YAML::Node v = map[key];
  if (!v || !v.IsScalar()) return "";
  return v.as<std::string>();
}

// Sets `data` from `<key>-data` (base64) or `file` from `<key>` (a path); data wins when both are given.
Status PemField(const Entry& entry, const std::string& key, std::string& file, std::string& data) {
  std::string encoded = Scalar(entry.node, (key + "-data").c_str());
  if (!encoded.empty()) {
    Result<std::string> decoded = DecodeBase64(encoded);
    if (!decoded) return Error{"kubeconfig field " + key + "-data is not valid base64"};
    data = std::move(decoded.value());
    return Status::Ok();
  }
  file = Resolve(Scalar(entry.node, key.c_str()), entry.base_dir);
  return Status::Ok();
}

Result<ExecPlugin> ParseExecPlugin(const YAML::Node& exec, const std::string& base_dir) {
  if (!exec.IsMap()) return Error{"exec is not a mapping"};
  ExecPlugin plugin;
  plugin.api_version = Scalar(exec, "apiVersion");
  if (plugin.api_version != "client.authentication.k8s.io/v1" &&
      plugin.api_version != "client.authentication.k8s.io/v1beta1") {
    return Error{"exec apiVersion \"" + plugin.api_version +
                 "\" is not client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1"};
  }
  plugin.command = Scalar(exec, "command");
  if (plugin.command.empty()) return Error{"exec has no command"};
  if (plugin.command.find('/') != std::string::npos) plugin.command = Resolve(plugin.command, base_dir);
  if (YAML::Node args = exec["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) return Error{"exec args is not a list"};
    for (const auto& a : args) {
      if (!a.IsScalar()) return Error{"exec args holds something other than a string"};
      plugin.args.push_back(a.as<std::string>());
    }
  }
  if (YAML::Node env = exec["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) return Error{"exec env is not a list"};
    for (const auto& e : env) {
      if (!e.IsMap() || Scalar(e, "name").empty()) return Error{"exec env holds an entry without a name"};
      plugin.env.emplace_back(Scalar(e, "name"), Scalar(e, "value"));
    }
  }
  return plugin;
}

Result<ClusterConfig> Build(const Merged& merged, const std::string& context_name) {
  ClusterConfig config;
  config.context = context_name.empty() ? merged.current_context : context_name;
  if (config.context.empty()) return Error{"kubeconfig has no current-context and no context was named"};
  auto context = merged.contexts.find(config.context);
  if (context == merged.contexts.end()) return Error{"kubeconfig has no context named " + config.context};
  config.cluster_name = Scalar(context->second.node, "cluster");
  config.user_name = Scalar(context->second.node, "user");
  config.default_namespace = Scalar(context->second.node, "namespace");
  if (config.default_namespace.empty()) config.default_namespace = "default";

  auto cluster = merged.clusters.find(config.cluster_name);
  if (cluster == merged.clusters.end()) {
    return Error{"kubeconfig context " + config.context + " names an unknown cluster " + config.cluster_name};
  }
  config.server = Scalar(cluster->second.node, "server");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (config.server.empty()) return Error{"kubeconfig cluster " + config.cluster_name + " has no server"};
  if (Status s = PemField(cluster->second, "certificate-authority", config.ca_file, config.ca_data); !s)
    return Error{s.message()};
  std::string insecure = Scalar(cluster->second.node, "insecure-skip-tls-verify");
  config.insecure_skip_tls_verify =
      insecure == "true" || insecure == "True" || insecure == "TRUE" || insecure == "yes" || insecure == "on";
  config.tls_server_name = Scalar(cluster->second.node, "tls-server-name");

  if (!config.user_name.empty()) {
    auto user = merged.users.find(config.user_name);
    if (user == merged.users.end()) {
      return Error{"kubeconfig context " + config.context + " names an unknown user " + config.user_name};
    }
    if (Status s =
            PemField(user->second, "client-certificate", config.client_cert_file, config.client_cert_data);
        !s) {
      return Error{s.message()};
    }
    if (Status s = PemField(user->second, "client-key", config.client_key_file, config.client_key_data); !s) {
      return Error{s.message()};
    }
    config.token = Scalar(user->second.node, "token");
    if (config.token.empty())
      config.token_file = Resolve(Scalar(user->second.node, "tokenFile"), user->second.base_dir);
    bool has_cert = !config.client_cert_file.empty() || !config.client_cert_data.empty();
    bool has_key = !config.client_key_file.empty() || !config.client_key_data.empty();
    if (has_cert != has_key) {
      return Error{"kubeconfig user " + config.user_name + " has a client certificate or key but not both"};
    }
    if (has_cert || !config.token.empty() || !config.token_file.empty()) return config;
    if (YAML::Node exec = user->second.node["exec"]; exec) {
      Result<ExecPlugin> plugin = ParseExecPlugin(exec, user->second.base_dir);
      if (!plugin) return Error{"kubeconfig user " + config.user_name + ": " + plugin.message()};
      config.exec = std::move(plugin.value());
    } else if (user->second.node["auth-provider"]) {
      return Error{"kubeconfig user " + config.user_name +
                   " uses an auth-provider plugin, which mgpu does not support (kubectl dropped them too; "
                   "use an exec credential plugin)"};
    }
  }
  return config;
}

}  // namespace

Result<ClusterConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& base_dir,
                                      const std::string& context) {
  Merged merged;
  if (Status s = MergeDocument(yaml_text, base_dir, merged); !s) return Error{s.message()};
  return Build(merged, context);
}

Result<ClusterConfig> LoadKubeconfig(const std::string& paths, const std::string& context) {
  Merged merged;
  bool any = false;
  std::stringstream list(paths);
  std::string path;
  while (std::getline(list, path, ':')) {
    if (path.empty()) continue;
    Result<std::string> text = ReadFile(path);
    // kubectl skips missing files in $KUBECONFIG; a single named file must exist.
    if (!text) {
      if (paths.find(':') == std::string::npos) return Error{"cannot read kubeconfig " + path};
      continue;
    }
    any = true;
    std::string base_dir = fs::absolute(fs::path(path)).parent_path().string();
    if (Status s = MergeDocument(text.value(), base_dir, merged); !s) return Error{path + ": " + s.message()};
  }
  if (!any) return Error{"none of the kubeconfig files " + paths + " could be read"};
  return Build(merged, context);
}

Result<ClusterConfig> InClusterConfig(const std::string& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return Error{"not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"};
  }
  ClusterConfig config;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  config.server = "https://" + h + ":" + port;
  config.token_file = service_account_dir + "/token";
  if (!fs::exists(config.token_file))
    return Error{"in-cluster token " + config.token_file + " does not exist"};
  config.ca_file = service_account_dir + "/ca.crt";
  if (!fs::exists(config.ca_file)) return Error{"in-cluster CA " + config.ca_file + " does not exist"};
  Result<std::string> ns = ReadFile(service_account_dir + "/namespace");
  config.default_namespace = ns ? ns.value() : "default";
  while (!config.default_namespace.empty() &&
         std::isspace(static_cast<unsigned char>(config.default_namespace.back()))) {
    config.default_namespace.pop_back();
  }
  if (config.default_namespace.empty()) config.default_namespace = "default";
  return config;
}

Result<ClusterConfig> ResolveClusterConfig(const std::string& kubeconfig_flag, const std::string& context) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag, context);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0')
    return LoadKubeconfig(env, context);
  Result<ClusterConfig> in_cluster = InClusterConfig();
  if (in_cluster) return in_cluster;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    std::string path = std::string(home) + "/.kube/config";
    if (fs::exists(path)) return LoadKubeconfig(path, context);
  }
  return Error{"no cluster configuration: pass --kubeconfig, set KUBECONFIG, or run in a cluster (" +
               in_cluster.message() + ")"};
}

}  // namespace mgpu::kube
