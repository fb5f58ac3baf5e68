// Runs a client-go credential plugin (a kubeconfig user's `exec`) and reads the ExecCredential it prints:
// the contract of client.authentication.k8s.io v1/v1beta1. The plugin gets KUBERNETES_EXEC_INFO (an
// ExecCredential with spec.interactive false) and its own env entries; its stderr passes through.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/kube/kubeconfig.h"
#include "common/result.h"

namespace mgpu::kube {

struct ExecCredential {
  std::string token;            // bearer token, or
  std::string client_cert_pem;  // a client certificate and key (both set)
  std::string client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expires;  // none: valid until the server says 401
};

// Blocks until the plugin exits.
Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin);

}  // namespace mgpu::kube
