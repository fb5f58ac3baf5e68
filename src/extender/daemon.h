// The whole extender wired together: API client, node and pod informers feeding the cache (and, where the
// cluster serves DRA and deploy/dra/ lets it read them, a ResourceClaim informer: docs/dra.md §7), the verbs
// and the HTTP server, and the optional leader election. main.cc and the integration tests start one of
// these.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/background.h"
#include "common/cluster_cache.h"
#include "common/config.h"
#include "common/kube/client.h"
#include "common/kube/event_queue.h"
#include "common/kube/informer.h"
#include "common/kube/workload.h"
#include "common/result.h"
#include "extender/extender.h"
#include "extender/leader.h"
#include "extender/metrics.h"
#include "extender/server.h"

namespace mgpu::extender {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  // Connects (nothing is contacted before the informers start), starts the informers, then serves on
  // config.extender.listen_address.
  Status Start(kube::ClusterConfig cluster);
  void Stop();

  int port() const { return server_ ? server_->port() : 0; }
  // Both informers have synced and, with leader election, this replica leads: followers report not-ready so
  // that the Service sends filter, prioritize and bind alike to the leader, whose cache holds its own binds.
  bool Ready() const;
  bool Leader() const;  // always true without leader election
  ClusterCache& cache() { return *cache_; }

 private:
  void StartClaims();

  Config config_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<kube::EventQueue> events_;
  std::unique_ptr<LeaderElector> elector_;
  std::unique_ptr<kube::WorkloadResolver> workloads_;
  std::unique_ptr<ClusterCache> cache_;
  Metrics metrics_;
  std::unique_ptr<Extender> extender_;
  std::unique_ptr<kube::Informer> nodes_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<HttpServer> server_;
  // Lists ResourceClaims until it may (the cluster serves resource.k8s.io/v1 and deploy/dra/'s RBAC is
  // applied), then starts claims_; until then DRA pods pass with no score.
  BackgroundThread claim_probe_;
  std::unique_ptr<kube::Informer> claims_;
  std::atomic<uint64_t> deleted_{0};  // pods the informer saw deleted
  // After each wave (deletions, ended workers, closed API connections): clears the decision memo and trims.
  BackgroundThread trimmer_;
};

}  // namespace mgpu::extender
