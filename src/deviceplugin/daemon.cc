#include "deviceplugin/daemon.h"

#include <spdlog/spdlog.h>

#include "deviceplugin/device_list.h"
#include "node/isolation_setup.h"

namespace mgpu::dp {
namespace {

constexpr const char* kVersion = MGPU_VERSION;

}  // namespace

Daemon::Daemon(Config config, std::string node_name, std::unique_ptr<node::GpuBackend> backend)
    : config_(std::move(config)), node_(std::move(node_name)), backend_(std::move(backend)) {}

Daemon::~Daemon() { Stop(); }

Status Daemon::Start(kube::ClusterConfig cluster) {
  if (state_) return Error{"the device plugin daemon of node " + node_ + " was started already"};
  if (node_.empty()) return Error{"no node name: set devicePlugin.nodeName, --node-name or NODE_NAME"};
  if (!backend_) return Error{"node " + node_ + " has no GPU backend"};
  auto gpus = backend_->Discover();
  if (!gpus.ok()) return gpus.error();
  std::vector<Card> cards;
  for (const node::GpuInfo& g : *gpus) cards.push_back(g.card);
  if (Status s = CheckListAndWatchSize(cards, config_); !s.ok()) return s;
  if (Status s = node::PrepareIsolation(config_.isolation, cards); !s.ok()) return s;
  kube::ClientOptions options;
  options.user_agent = "mgpu-device-plugin";
  options.request_timeout = std::chrono::seconds(10);  // bounds what a refused kubelet call waits on
  auto client = kube::Client::Create(std::move(cluster), options);
  if (!client.ok()) return client.error();
  client_ = std::move(*client);
  spdlog::info("node={} backend={} cards={} isolation={} memoryUnitMiB={}", node_, backend_->Name(),
               cards.size(), Name(config_.isolation.backend), config_.memory_unit_mib);

  state_ = std::make_unique<node::DeviceState>(cards);
  health_ = std::make_unique<node::HealthWatcher>(*backend_, *state_);
  pod_resources_ = std::make_unique<PodResourcesPoller>(
      config_, [this](const AllocatedPods&) { pods_->AnswerPublished(); });
  hand_off_ = std::make_unique<HandOff>([this] { return pod_resources_->RequestsStarted(); });
  pods_ = std::make_unique<PodTracker>(config_, node_, *client_, *pod_resources_, *hand_off_);
  plugin_ = std::make_unique<DevicePlugin>(config_, *state_, *hand_off_, pods_.get());
  publisher_ = std::make_unique<NodePublisher>(config_, node_, *client_, *state_, kVersion);

  pods_->Start();
  pod_resources_->Start();
  health_->Start();
  publisher_->Start();
  if (Status s = plugin_->Start(); !s.ok()) {
    Stop();
    return s;
  }
  if (!config_.device_plugin.metrics_address.empty()) {
    metrics_ = std::make_unique<MetricsServer>(
        [this] {
          MetricsSnapshot s{node_, state_->Cards(), pod_resources_->Latest(), {}, {}};
          if (config_.isolation.backend == IsolationBackend::kMgpu)
            s.guard = ReadGuardStates(config_.isolation.guard_state_directory, s.cards);
          for (Resource r : kAllResources)
            s.calls.emplace_back(FullName(r, config_.Names()), plugin_->Counts(r));
          s.registered = plugin_->Registered();
          return s;
        },
        [this] { return plugin_->Serving(); });
    if (Status s = metrics_->Start(config_.device_plugin.metrics_address); !s.ok()) {
      Stop();
      return s;
    }
  }
  return Status::Ok();
}

void Daemon::Stop() {
  // First the inventory says the plugin is stopping, so the extender places no new pod here while the kubelet
  // still counts the cards (such a pod would fail admission for good).
  if (publisher_) {
    publisher_->Stop();
    if (Status s = publisher_->AnnounceStopping(); !s.ok()) spdlog::warn("{}", s.message());
  }
  // Waits inside kubelet calls end first, so that the servers drain at once.
  if (pods_) pods_->Stop();
  if (pod_resources_) pod_resources_->Stop();
  if (metrics_) metrics_->Stop();
  if (plugin_) plugin_->Stop();
  if (publisher_) publisher_->Stop();
  if (health_) health_->Stop();
}

std::vector<Card> Daemon::Cards() const { return state_ ? state_->Cards() : std::vector<Card>(); }

int Daemon::metrics_port() const { return metrics_ ? metrics_->Port() : 0; }

bool Daemon::Registered() const { return plugin_ && plugin_->Registered(); }

bool Daemon::Synced() const { return pods_ && pods_->Synced() && pod_resources_->HasAnswer(); }

uint64_t Daemon::Publications() const { return publisher_ ? publisher_->published() : 0; }

CallCounts Daemon::Counts(Resource resource) const {
  return plugin_ ? plugin_->Counts(resource) : CallCounts{};
}

}  // namespace mgpu::dp
