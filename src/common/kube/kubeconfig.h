// Where the API server is and how to authenticate to it: from a kubeconfig file (current or named context) or
// from the pod's service account (in-cluster). Resolution order follows kubectl and client-go: an explicit
// --kubeconfig path, then $KUBECONFIG (colon-separated files, the first file to set a value wins), then
// in-cluster, then
// ~/.kube/config. Relative file paths in a kubeconfig are resolved against the directory of the file naming
// them. Parsing only: nothing here opens a connection.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace mgpu::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// A client-go credential plugin (a kubeconfig user's `exec`), run for a bearer token or client certificate.
struct ExecPlugin {
  std::string api_version{};  // client.authentication.k8s.io/v1 or /v1beta1: of the ExecCredential exchanged
  std::string command{};      // a relative path with a '/' is resolved against the kubeconfig's directory
  std::vector<std::string> args{};
  std::vector<std::pair<std::string, std::string>> env{};  // added to this process's environment
};

// One resolved connection. A *_file field is a path, a *_data field holds PEM bytes; at most one of each pair
// is set.
struct ClusterConfig {
  std::string server{};  // "https://host:port", no trailing slash
  std::string ca_file{};
  std::string ca_data{};
  std::string client_cert_file{};
  std::string client_cert_data{};
  std::string client_key_file{};
  std::string client_key_data{};
  std::string token{};       // static bearer token
  std::string token_file{};  // re-read whenever it changes (service-account tokens rotate)
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name{};  // overrides the name checked in the server certificate
  std::string context{};          // the kubeconfig context used; empty in-cluster
  std::string cluster_name{};     // the kubeconfig cluster used
  std::string user_name{};        // the kubeconfig user used
  std::string
      default_namespace{};  // the context's namespace (or the service account's), "default" when unset
  std::optional<ExecPlugin>
      exec{};  // credentials come from this plugin (when no token or certificate is set)
};

// Parses kubeconfig YAML. `context` empty means current-context; `base_dir` resolves relative paths.
Result<ClusterConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& base_dir,
                                      const std::string& context = "");

// Loads one kubeconfig file, or several separated by ':' merged as kubectl merges $KUBECONFIG.
Result<ClusterConfig> LoadKubeconfig(const std::string& paths, const std::string& context = "");

// In-cluster: $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT, the token and CA in
// `service_account_dir`.
Result<ClusterConfig> InClusterConfig(const std::string& service_account_dir = kServiceAccountDir);

// The daemons' entry point: `kubeconfig_flag` (may be empty), then $KUBECONFIG, then in-cluster, then
// ~/.kube/config.
Result<ClusterConfig> ResolveClusterConfig(const std::string& kubeconfig_flag,
                                           const std::string& context = "");

}  // namespace mgpu::kube
