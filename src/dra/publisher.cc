#include "dra/publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "common/dra.h"
#include "dra/plugin.h"
#include "dra/slices.h"
#include "node/node_metadata.h"

namespace mgpu::dra {
namespace {

using kube::Json;

// How soon a failed pass is tried again, and how long the loop waits when nothing happens.
constexpr auto kRetry = std::chrono::milliseconds(2000);
constexpr auto kIdle = std::chrono::milliseconds(30000);

int64_t GenerationOf(const Json& slice) {
  const Json* g = FindPath(slice, {"spec", "pool", "generation"});
  return g && g->is_number_integer() ? g->get<int64_t>() : 0;
}

std::string PublisherAnnotation(const Config& config) { return config.resource_domain + "/dra-publisher"; }

// "<start time>/<id>", the start time as 20 digits so that the text orders as the times do.
std::string PublisherName(const std::string& instance) {
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  char started[32];
  std::snprintf(started, sizeof started, "%020lld", static_cast<long long>(now.count()));
  return std::string(started) + "/" + instance;
}

}  // namespace

SlicePublisher::SlicePublisher(const Config& config, std::string node, std::vector<NodeCard> cards,
                               kube::Client& client, const node::DeviceState& state, std::string version,
                               std::string instance)
    : config_(config),
      node_(std::move(node)),
      cards_(std::move(cards)),
      client_(client),
      state_(state),
      version_(std::move(version)),
      publisher_(PublisherName(instance)) {}

std::optional<std::string> SlicePublisher::NewerPublisher(const std::map<std::string, Json>& stored) const {
  const std::string annotation = PublisherAnnotation(config_);
  for (const auto& [name, s] : stored) {
    const Json* writer = FindPath(s, {"metadata", "annotations", annotation.c_str()});
    if (writer == nullptr || !writer->is_string() || writer->get<std::string>() <= publisher_) continue;
    const std::string text = writer->get<std::string>();
    const std::string id = text.substr(text.find('/') + 1);
    if (!id.empty() && InstanceAnswers(config_, id)) return id;
  }
  return std::nullopt;
}

SlicePublisher::~SlicePublisher() { Stop(); }

void SlicePublisher::Start() {
  kube::InformerOptions options;
  options.resource = kube::kResourceSlices;
  options.selectors.field_selector = "spec.nodeName=" + node_ + ",spec.driver=" + DriverName(config_);
  kube::InformerHandlers handlers;
  handlers.on_add = [this](const Json& o) { MarkDirty(o); };
  handlers.on_update = [this](const Json&, const Json& o) { MarkDirty(o); };
  handlers.on_delete = [this](const Json&) {
    dirty_ = true;
    state_.Wake();
  };
  informer_ = std::make_unique<kube::Informer>(client_, options, handlers);
  informer_->Start();
  thread_.Start([this] { Run(); });
}

void SlicePublisher::Stop() {
  thread_.Stop([this] { state_.Wake(); });
  if (informer_) informer_->Stop();
}

void SlicePublisher::MarkDirty(const Json& object) {
  {
    std::lock_guard lock(mu_);
    auto it = written_.find(MetadataString(object, "name"));
    if (it != written_.end() && it->second == MetadataString(object, "resourceVersion"))
      return;  // our own write
  }
  dirty_ = true;
  state_.Wake();
}

void SlicePublisher::Run() {
  // The node's labels for nodeSelector, and its cards as D/gpu-dra-inventory instead of the device plugin's
  // D/gpu-inventory: the extender scores DRA pods with them and places no device-plugin pod here.
  bool node_done = false, node_failing = false;
  uint64_t seen = state_.Generation() - 1;
  while (!thread_.stopping()) {
    if (!node_done) {
      kube::MetadataPatch patch = node::NodeMetadata(state_.Cards(), config_, version_, 0);
      const ResourceNames names = config_.Names();
      patch.annotations[names.gpu_dra_inventory] = patch.annotations[names.gpu_inventory];
      patch.annotations[names.gpu_inventory] = std::nullopt;
      kube::ApiResult r = client_.PatchNodeMetadata(node_, patch);
      node_done = r.ok();
      if (!node_done && !node_failing) spdlog::warn("node={} cannot label the node: {}", node_, r.message());
      node_failing = !node_done;
    }
    const bool synced = informer_->WaitForSync(std::chrono::milliseconds(500));
    if (thread_.stopping()) return;
    bool ok = false;
    if (synced) {
      dirty_ = false;
      seen = state_.Generation();
      ok = Reconcile(state_.Cards());
    }
    up_to_date_ = ok;
    const auto wait = ok && node_done ? kIdle : kRetry;
    state_.WaitForChange(seen, wait, [this] { return thread_.stopping() || dirty_.load(); });
  }
}

bool SlicePublisher::Reconcile(const std::vector<Card>& health) {
  std::vector<NodeCard> cards = cards_;
  for (NodeCard& c : cards) {
    for (const Card& h : health) {
      if (h.uuid == c.card.uuid) c.card.healthy = h.healthy;
    }
  }
  std::vector<Json> wanted = BuildSlices(node_, cards, config_, 0);
  std::map<std::string, Json> stored;
  for (Json& s : informer_->Snapshot()) {
    std::string name =
        MetadataString(s, "name");  // before the move: nlohmann's operator= takes its value first
    stored[std::move(name)] = std::move(s);
  }

  int64_t newest = generation_;
  std::set<int64_t> generations;
  for (const auto& [name, s] : stored) {
    newest = std::max(newest, GenerationOf(s));
    generations.insert(GenerationOf(s));
  }
  // Slices that already say what the cards say, all of one generation, are adopted as they are: those of an
  // earlier life of this daemon, or of the other instance of a rolling update.
  bool same = stored.size() == wanted.size() && generations.size() == 1;
  for (const Json& w : wanted) {
    auto it = stored.find(MetadataString(w, "name"));
    same = same && it != stored.end() && SameSpec(it->second, w);
  }
  if (same) {
    generation_ = *generations.begin();
    return true;
  }
  if (auto newer = NewerPublisher(stored)) {
    if (!deferring_)
      spdlog::info("node={} the pool is published by the newer instance {}: this one leaves it", node_, *newer);
    deferring_ = true;
    return false;
  }
  deferring_ = false;

  const int64_t generation = newest + 1;
  wanted = BuildSlices(node_, cards, config_, generation);
  std::set<std::string> names;
  for (Json& w : wanted) {
    const std::string name = MetadataString(w, "name");
    w["metadata"]["annotations"][PublisherAnnotation(config_)] = publisher_;
    names.insert(name);
    auto it = stored.find(name);
    kube::ApiResult r = [&] {
      if (it == stored.end()) return client_.Create(kube::kResourceSlices, "", w);
      w["metadata"]["resourceVersion"] = MetadataString(it->second, "resourceVersion");
      return client_.Replace(kube::kResourceSlices, "", name, w);
    }();
    if (!r.ok()) {
      spdlog::warn("node={} cannot write ResourceSlice {} (generation {}): {}", node_, name, generation,
                   r.message());
      return false;
    }
    std::lock_guard lock(mu_);
    written_[name] = MetadataString(*r, "resourceVersion");
  }
  for (const auto& [name, s] : stored) {
    if (names.count(name)) continue;
    kube::ApiResult r = client_.Delete(kube::kResourceSlices, "", name);
    if (!r.ok() && !r.IsNotFound()) {
      spdlog::warn("node={} cannot delete ResourceSlice {}: {}", node_, name, r.message());
      return false;
    }
  }
  generation_ = generation;
  publications_++;
  int unhealthy = 0;
  for (const NodeCard& c : cards) unhealthy += !c.card.healthy;
  spdlog::info("node={} published {} cards in {} ResourceSlices of pool {} (generation {}, {} unhealthy)",
               node_, cards.size(), wanted.size(), node_, generation, unhealthy);
  return true;
}

Status PublishOnce(kube::Client& client, const std::string& node, const std::vector<NodeCard>& cards,
                   const Config& config) {
  kube::ApiResult stored =
      client.List(kube::kResourceSlices, "",
                  {.field_selector = "spec.nodeName=" + node + ",spec.driver=" + DriverName(config)});
  if (!stored.ok()) return stored.error();
  int64_t newest = 0;
  std::map<std::string, std::string> versions;
  for (const Json& s : stored->value("items", Json::array())) {
    newest = std::max(newest, GenerationOf(s));
    versions[MetadataString(s, "name")] = MetadataString(s, "resourceVersion");
  }
  for (Json& s : BuildSlices(node, cards, config, newest + 1)) {
    const std::string name = MetadataString(s, "name");
    auto it = versions.find(name);
    if (it != versions.end()) s["metadata"]["resourceVersion"] = it->second;
    kube::ApiResult r = it == versions.end() ? client.Create(kube::kResourceSlices, "", s)
                                             : client.Replace(kube::kResourceSlices, "", name, s);
    if (!r.ok()) return Error{"ResourceSlice " + name + ": " + r.message()};
  }
  return Status::Ok();
}

}  // namespace mgpu::dra
