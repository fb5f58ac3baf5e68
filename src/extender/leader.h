// Lease-based leader election (coordination.k8s.io/v1 Lease), so that of several replicas only one binds.
// Contract:
//  - A background thread creates or renews the lease every duration/4 while it holds it, and takes it over
//    when the holder has not renewed it for a whole lease duration as seen by this replica's own clock (the
//    record's timestamps are never compared across machines).
//  - IsLeader() is true only until the last successful renewal plus the duration less one retry period, so an
//    old leader stops binding before any other replica may take the lease over.
//  - Stop() releases a held lease (empty holder) so a follower takes over at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "common/background.h"
#include "common/kube/client.h"

namespace mgpu::extender {

class LeaderElector {
 public:
  LeaderElector(kube::Client& client, std::string ns, std::string name, std::string identity,
                std::chrono::seconds duration);
  ~LeaderElector();
  void Start();
  void Stop();
  bool IsLeader() const;
  const std::string& identity() const { return identity_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  void TryAcquireOrRenew();
  kube::Json LeaseRecord(const kube::Json& base, int transitions) const;

  kube::Client& client_;
  const std::string ns_, name_, identity_;
  const std::chrono::seconds duration_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  BackgroundThread thread_{mu_, cv_};
  Clock::time_point leader_until_{};
  std::string observed_record_;  // holder + renewTime as last read
  Clock::time_point observed_at_{};
};

}  // namespace mgpu::extender
