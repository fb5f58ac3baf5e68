#include "extender/leader.h"

#include <spdlog/spdlog.h>

#include <ctime>

#include "common/clock.h"

namespace mgpu::extender {
namespace {

using kube::Json;

std::string SpecString(const Json& lease, const char* key) {
  auto spec = lease.find("spec");
  if (spec == lease.end() || !spec->is_object()) return "";
  auto v = spec->find(key);
  return v != spec->end() && v->is_string() ? v->get<std::string>() : "";
}

}  // namespace

LeaderElector::LeaderElector(kube::Client& client, std::string ns, std::string name, std::string identity,
                             std::chrono::seconds duration)
    : client_(client),
      ns_(std::move(ns)),
      name_(std::move(name)),
      identity_(std::move(identity)),
      duration_(duration) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_.Start([this] { Run(); });
}

void LeaderElector::Stop() {
  thread_.Stop();
  bool held;
  {
    std::lock_guard lock(mu_);
    held = Clock::now() < leader_until_;
    leader_until_ = {};
  }
  if (!held) return;
  kube::ApiResult lease = client_.GetLease(ns_, name_);
  if (lease.ok() && SpecString(*lease, "holderIdentity") == identity_) {
    Json released = *lease;
    released["spec"]["holderIdentity"] = "";
    if (kube::ApiResult r = client_.UpdateLease(ns_, released); r.ok())
      spdlog::info("leader election: {} released lease {}/{}", identity_, ns_, name_);
  }
}

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return Clock::now() < leader_until_;
}

Json LeaderElector::LeaseRecord(const Json& base, int transitions) const {
  Json lease = base.is_object() ? base : Json::object();
  lease["apiVersion"] = "coordination.k8s.io/v1";
  lease["kind"] = "Lease";
  lease["metadata"]["name"] = name_;
  lease["metadata"]["namespace"] = ns_;
  Json& spec = lease["spec"];
  const std::string now = Rfc3339(UnixNowNs(), /*micros=*/true);
  if (SpecString(lease, "holderIdentity") != identity_) spec["acquireTime"] = now;
  spec["holderIdentity"] = identity_;
  spec["leaseDurationSeconds"] = duration_.count();
  spec["renewTime"] = now;
  spec["leaseTransitions"] = transitions;
  return lease;
}

void LeaderElector::TryAcquireOrRenew() {
  const auto started = Clock::now();
  // In milliseconds: seconds / 4 would round a short lease's margin down to nothing.
  const auto retry = std::chrono::duration_cast<std::chrono::milliseconds>(duration_) / 4;
  const auto won = [&] {
    std::lock_guard lock(mu_);
    leader_until_ = started + duration_ - retry;
  };
  kube::ApiResult lease = client_.GetLease(ns_, name_);
  if (lease.IsNotFound()) {
    if (client_.CreateLease(ns_, LeaseRecord(Json(), 0)).ok()) {
      spdlog::info("leader election: {} created lease {}/{} and leads", identity_, ns_, name_);
      won();
    }
    return;
  }
  if (!lease.ok()) {
    spdlog::warn("leader election: cannot read lease {}/{}: {}", ns_, name_, lease.message());
    return;
  }
  const std::string holder = SpecString(*lease, "holderIdentity");
  const std::string record = holder + "|" + SpecString(*lease, "renewTime");
  int transitions = 0;
  if (auto spec = lease->find("spec"); spec != lease->end() && spec->is_object())
    transitions = spec->value("leaseTransitions", 0);
  bool expired;
  {
    std::lock_guard lock(mu_);
    if (record != observed_record_) {
      observed_record_ = record;
      observed_at_ = started;
    }
    expired = started >= observed_at_ + duration_;
  }
  if (holder != identity_ && !holder.empty() && !expired) return;
  const bool takeover = holder != identity_;
  kube::ApiResult updated = client_.UpdateLease(ns_, LeaseRecord(*lease, transitions + (takeover ? 1 : 0)));
  if (!updated.ok()) {
    if (!updated.IsConflict())
      spdlog::warn("leader election: cannot update lease {}/{}: {}", ns_, name_, updated.message());
    return;
  }
  if (takeover)
    spdlog::info("leader election: {} took lease {}/{} over from '{}'", identity_, ns_, name_, holder);
  won();
}

void LeaderElector::Run() {
  const auto retry = std::max<std::chrono::milliseconds>(duration_ / 4, std::chrono::milliseconds(100));
  std::unique_lock lock(mu_);
  while (!thread_.stopping()) {
    lock.unlock();
    TryAcquireOrRenew();
    lock.lock();
    thread_.WaitFor(lock, retry);
  }
}

}  // namespace mgpu::extender
