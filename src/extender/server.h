// The extender's HTTP server (cpp-httplib, a thread pool): POST /filter, /choose, /prioritize, /bind,
// /preempt (kube-scheduler's JSON contract: 200 with Error set for scheduling errors, 400 for malformed
// requests, 413 for bodies over extender.max_body_bytes), POST /validate and /mutate-memory (the admission
// webhooks, admission.h, which need no cache and answer whether ready or not), POST /mutate and /validate-claims (the DRA mode's
// webhooks, dra_admission.h, likewise) and GET /healthz, /readyz, /metrics, /v1/nodes. While `ready` is false
// the verbs refuse (filter, choose and bind with Error set, prioritize and preempt with 503). A handler never
// throws out of the server: an unexpected exception is answered 500 and logged. Connections are bounded as
// common/http_server.h says, by extender.httpWorkers, httpRequestTimeoutMs and httpConnectionsPerClient.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/cluster_cache.h"
#include "common/http_server.h"
#include "common/result.h"
#include "extender/dra_admission.h"
#include "extender/extender.h"
#include "extender/metrics.h"

namespace mgpu::extender {

class HttpServer {
 public:
  // `workload` reads a pod's controller's annotations for /validate and /mutate (empty: none are read);
  // `templates` creates the ResourceClaimTemplates /mutate names (dra_admission.h; empty: /mutate refuses);
  // `claims` reads the claim specs /mutate-claims counts (empty: none are read).
  HttpServer(Extender& extender, ClusterCache& cache, Metrics& metrics, std::function<bool()> ready,
             WorkloadLookup workload = {}, TemplateWriter templates = {}, ClaimSpecReader claims = {});
  ~HttpServer();
  // Listens on "host:port" (port 0: a free one, see port()); TLS when cert and key files are configured.
  Status Start(const std::string& address, const ExtenderConfig& config);
  void Stop();
  int port() const { return port_; }

 private:
  Extender& extender_;
  ClusterCache& cache_;
  Metrics& metrics_;
  std::function<bool()> ready_;
  WorkloadLookup workload_;
  TemplateWriter templates_;
  ClaimSpecReader claims_;
  std::unique_ptr<BoundedHttpServer> server_;
  int port_ = 0;
};

}  // namespace mgpu::extender
