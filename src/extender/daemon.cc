#include "extender/daemon.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "common/dra.h"
#include "common/http_server.h"
#include "common/json_path.h"

namespace mgpu::extender {
namespace {

// How often the trimmer looks whether pods were deleted or workers ended: once a second passes with none
// after some, the wave is over and freed memory goes back to the system (malloc_trim).
constexpr std::chrono::milliseconds kTrimCheck{1000};
// How often the extender looks again whether it may list ResourceClaims (docs/dra.md §7).
constexpr std::chrono::seconds kClaimProbe{60};

// A claim as the cache reads it (dra::ReadClaim): its identity and its allocation results.
void KeepAllocation(kube::Json& claim) {
  kube::Json slim = {{"metadata", kube::Json::object()}};
  for (const char* key : {"name", "namespace", "uid", "resourceVersion"})
    if (const kube::Json* v = FindPath(claim, {"metadata", key})) slim["metadata"][key] = *v;
  if (const kube::Json* results = FindPath(claim, {"status", "allocation", "devices", "results"}))
    slim["status"]["allocation"]["devices"]["results"] = *results;
  claim = std::move(slim);
}

std::string ClaimKeyOf(const kube::Json& claim) {
  return kube::MetadataString(claim, "namespace") + "/" + kube::MetadataString(claim, "name");
}

// POD_NAME (the Deployment sets it from the downward API) or the host name, plus a random suffix so that a
// restarted replica never mistakes the lease of its previous life for its own.
std::string Identity() {
  std::string base;
  if (const char* pod = std::getenv("POD_NAME"); pod && *pod) {
    base = pod;
  } else {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    base = host;
  }
  std::random_device random;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "_%08x", random());
  return base + suffix;
}

}  // namespace

Daemon::Daemon(Config config) : config_(std::move(config)) {}

Daemon::~Daemon() { Stop(); }

Status Daemon::Start(kube::ClusterConfig cluster) {
  kube::ClientOptions options;
  options.user_agent = "mgpu-scheduler-extender";
  options.request_timeout = std::chrono::milliseconds(4000);  // inside kube-scheduler's 5 s extender timeout
  Result<std::unique_ptr<kube::Client>> client = kube::Client::Create(std::move(cluster), options);
  if (!client.ok()) return Error{client.message()};
  client_ = std::move(*client);
  workloads_ = std::make_unique<kube::WorkloadResolver>(client_.get());
  kube::EventLimits event_limits;
  event_limits.per_second = static_cast<double>(config_.extender.events_per_second);
  event_limits.burst = std::max(1.0, 10 * event_limits.per_second);
  events_ = std::make_unique<kube::EventQueue>(*client_, "mgpu-scheduler-extender", event_limits);
  cache_ = std::make_unique<ClusterCache>(config_);
  if (config_.extender.leader_election) {
    elector_ = std::make_unique<LeaderElector>(*client_, config_.extender.lease_namespace,
                                               config_.extender.lease_name, Identity(),
                                               std::chrono::seconds(config_.extender.lease_duration_seconds));
    elector_->Start();
  }
  extender_ = std::make_unique<Extender>(
      *cache_, client_.get(), workloads_.get(), metrics_, [this] { return Leader(); }, events_.get());

  // The informers' edge: each event's object is read once into facts (a pod with its workload's annotations,
  // resolved here on the informer's thread, outside every lock) and the cache takes the facts.
  ClusterCache& cache = *cache_;
  const Config& config = config_;
  const auto upsert_node = [&cache, &config](const kube::Json& n) { cache.UpsertNode(ReadNode(n, config)); };
  nodes_ = std::make_unique<kube::Informer>(
      *client_, kube::InformerOptions{.resource = kube::kNodes},
      kube::InformerHandlers{
          upsert_node, [upsert_node](const kube::Json&, const kube::Json& n) { upsert_node(n); },
          [&cache](const kube::Json& n) { cache.DeleteNode(kube::MetadataString(n, "name")); }});
  kube::WorkloadResolver& workloads = *workloads_;
  const auto upsert_pod = [&cache, &config, &workloads](const kube::Json& p) {
    cache.UpsertPod(workloads.Read(p, config));
  };
  pods_ = std::make_unique<kube::Informer>(
      *client_,
      kube::InformerOptions{.resource = kube::kPods,
                            .transform = [&config](kube::Json& pod) { KeepSchedulingFields(pod, config); },
                            .max_objects = static_cast<size_t>(config.extender.max_pods)},
      kube::InformerHandlers{upsert_pod,
                             [upsert_pod](const kube::Json&, const kube::Json& p) { upsert_pod(p); },
                             [&cache, &extender = *extender_, &deleted = deleted_](const kube::Json& p) {
                               cache.DeletePod(PodKeyOf(p), kube::MetadataString(p, "uid"));
                               extender.Forget(kube::MetadataString(p, "uid"));
                               deleted.fetch_add(1, std::memory_order_relaxed);
                             }});
  nodes_->Start();
  pods_->Start();
  claim_probe_.Start([this] {
    bool said = false;
    do {
      kube::ApiResult probe = client_->List(kube::kResourceClaims, "", {.at_most = 1});
      if (probe.ok()) {
        StartClaims();
        return;
      }
      if (!said)
        spdlog::info(
            "DRA pods pass without mgpu's scores until ResourceClaims can be listed ({}); looking "
            "again every {} s",
            probe.message(), kClaimProbe.count());
      said = true;
    } while (claim_probe_.SleepFor(kClaimProbe));
  });
  // glibc keeps freed memory in its arenas: after a wave of deletions, or of HTTP workers ending their
  // threads once a burst is over (WorkerPool), or of API connections closing once idle (by the trimmer, as
  // the client may be silent by then, or by the next request released, such as the leader's renewal: each
  // counts), or after the start-up's lists, hand it back so that RSS follows the cluster down. Trimming
  // during the wave would only give back what the next pods take again.
  trimmer_.Start([this] {
    const auto ended = [&] { return deleted_.load() + WorkerPool::Retired() + client_->ClosedHandles(); };
    uint64_t seen = ended();
    bool wave = false, synced = false;
    while (trimmer_.SleepFor(kTrimCheck)) {
      client_->CloseIdleHandles();
      const uint64_t now = ended();
      if (now != seen) {
        seen = now;
        wave = true;
      } else if (wave) {
        extender_->ForgetDecisions();
        malloc_trim(0);
        metrics_.CountMemoryTrim();
        wave = false;
      }
      if (!synced && nodes_->HasSynced() && pods_->HasSynced()) synced = wave = true;
    }
  });
  server_ = std::make_unique<HttpServer>(
      *extender_, *cache_, metrics_, [this] { return Ready(); },
      [this](const nlohmann::json& pod) { return workloads_->Resolve(pod); },
      [this](const std::string& ns, const nlohmann::json& claim_template) -> Status {
        kube::ApiResult r = client_->Create(kube::kResourceClaimTemplates, ns, claim_template);
        if (r.ok() || r.http_status() == 409) return Status::Ok();  // 409: it exists already
        return r.error();
      },
      [this](const std::string& ns, const nlohmann::json& entry) -> Result<std::optional<nlohmann::json>> {
        const std::string from_template = StringAt(entry, {"resourceClaimTemplateName"});
        const std::string claim = StringAt(entry, {"resourceClaimName"});
        if (from_template.empty() && claim.empty()) return std::optional<nlohmann::json>();
        kube::ApiResult r = from_template.empty() ? client_->Get(kube::kResourceClaims, ns, claim)
                                                  : client_->Get(kube::kResourceClaimTemplates, ns, from_template);
        if (r.IsNotFound()) return std::optional<nlohmann::json>();
        if (!r.ok()) return r.error();
        const nlohmann::json* spec = from_template.empty() ? FindPath(*r, {"spec"}) : FindPath(*r, {"spec", "spec"});
        return spec ? std::optional<nlohmann::json>(*spec) : std::optional<nlohmann::json>();
      });
  return server_->Start(config_.extender.listen_address, config_.extender);
}

void Daemon::StartClaims() {
  ClusterCache& cache = *cache_;
  const Config& config = config_;
  const auto upsert = [&cache, &config](const kube::Json& c) {
    Result<std::optional<dra::ClaimFacts>> claim = dra::ReadClaim(c, config);
    if (claim.ok() && *claim) {
      cache.UpsertClaim(**claim);
      return;
    }
    if (!claim.ok()) spdlog::warn("not counting {}", claim.message());
    cache.DeleteClaim(ClaimKeyOf(c));  // deallocated, or unreadable: it holds nothing we can count
  };
  claims_ = std::make_unique<kube::Informer>(
      *client_, kube::InformerOptions{.resource = kube::kResourceClaims, .transform = KeepAllocation},
      kube::InformerHandlers{upsert, [upsert](const kube::Json&, const kube::Json& c) { upsert(c); },
                             [&cache](const kube::Json& c) { cache.DeleteClaim(ClaimKeyOf(c)); }});
  claims_->Start();
  spdlog::info("counting DRA claims: DRA pods' nodes are scored with mgpu's policy");
}

void Daemon::Stop() {
  trimmer_.Stop();
  claim_probe_.Stop();
  if (claims_) claims_->Stop();
  if (server_) server_->Stop();
  if (pods_) pods_->Stop();
  if (nodes_) nodes_->Stop();
  if (elector_) elector_->Stop();
  if (events_) events_->Stop();
}

bool Daemon::Ready() const {
  return nodes_ && pods_ && nodes_->HasSynced() && pods_->HasSynced() && Leader();
}

bool Daemon::Leader() const {
  return !config_.extender.leader_election || (elector_ && elector_->IsLeader());
}

}  // namespace mgpu::extender
