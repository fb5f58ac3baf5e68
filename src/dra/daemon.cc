#include "dra/daemon.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/dra.h"
#include "node/isolation_setup.h"

namespace mgpu::dra {

class Daemon::ApiClaims final : public ClaimReader {
 public:
  explicit ApiClaims(kube::Client& client) : client_(client) {}
  Result<nlohmann::json> GetClaim(const std::string& ns, const std::string& name) override {
    kube::ApiResult r = client_.Get(kube::kResourceClaims, ns, name);
    if (!r.ok()) return r.error();
    return std::move(r).value();
  }

 private:
  kube::Client& client_;
};

Daemon::Daemon(Config config, std::string node_name, std::unique_ptr<node::GpuBackend> backend,
               PluginInstance instance)
    : config_(std::move(config)),
      node_(std::move(node_name)),
      instance_(std::move(instance)),
      backend_(std::move(backend)) {}

Daemon::~Daemon() { Stop(); }

Status Daemon::Start(kube::ClusterConfig cluster) {
  if (state_) return Error{"the DRA daemon of node " + node_ + " was started already"};
  if (node_.empty()) return Error{"no node name: set devicePlugin.nodeName, --node-name or NODE_NAME"};
  if (!backend_) return Error{"node " + node_ + " has no GPU backend"};
  auto gpus = backend_->Discover();
  if (!gpus.ok()) return gpus.error();
  cards_ = NodeCardsOf(*gpus, config_, config_.dra.device_root);
  std::vector<Card> cards;
  for (const NodeCard& c : cards_) cards.push_back(c.card);
  if (Status s = node::PrepareIsolation(config_.isolation, cards); !s.ok()) return s;
  auto checkpoint =
      PreparedClaims::Open((std::filesystem::path(config_.dra.state_directory) / "checkpoint.json").string());
  if (!checkpoint.ok()) return checkpoint.error();
  claims_ = std::move(*checkpoint);
  kube::ClientOptions options;
  options.user_agent = "mgpu-device-plugin";
  options.request_timeout = std::chrono::seconds(10);  // bounds what a kubelet call waits on
  auto client = kube::Client::Create(std::move(cluster), options);
  if (!client.ok()) return client.error();
  client_ = std::move(*client);
  reader_ = std::make_unique<ApiClaims>(*client_);
  spdlog::info("node={} mode=dra driver={} instance={} backend={} cards={} isolation={} prepared_claims={}",
               node_, DriverName(config_), instance_.id.empty() ? "-" : instance_.id, backend_->Name(),
               cards_.size(), Name(config_.isolation.backend), claims_->All().size());

  state_ = std::make_unique<node::DeviceState>(cards);
  health_ = std::make_unique<node::HealthWatcher>(*backend_, *state_);
  preparer_ = std::make_unique<Preparer>(config_, node_, cards_, *state_, *claims_, *reader_);
  if (int removed = preparer_->RemoveOrphanSpecs(); removed > 0)
    spdlog::info("node={} removed {} CDI specs of no prepared claim", node_, removed);
  publisher_ =
      std::make_unique<SlicePublisher>(config_, node_, cards_, *client_, *state_, MGPU_VERSION, instance_.id);
  plugin_ = std::make_unique<KubeletPlugin>(config_, node_, *preparer_, *state_, instance_);

  health_->Start();
  publisher_->Start();
  if (Status s = plugin_->Start(); !s.ok()) {
    Stop();
    return s;
  }
  return Status::Ok();
}

void Daemon::Stop() {
  if (plugin_) plugin_->Stop();
  if (publisher_) publisher_->Stop();
  if (health_) health_->Stop();
}

Result<int> RemoveNodeSlices(kube::Client& client, const std::string& node, const Config& config) {
  kube::ListOptions selectors;
  selectors.field_selector = "spec.nodeName=" + node + ",spec.driver=" + DriverName(config);
  kube::ApiResult list = client.List(kube::kResourceSlices, "", selectors);
  if (!list.ok()) return list.error();
  int removed = 0;
  for (const kube::Json& s : (*list).value("items", kube::Json::array())) {
    kube::ApiResult r = client.Delete(kube::kResourceSlices, "", MetadataString(s, "name"));
    if (!r.ok() && !r.IsNotFound()) return r.error();
    removed += r.ok();
  }
  return removed;
}

}  // namespace mgpu::dra
