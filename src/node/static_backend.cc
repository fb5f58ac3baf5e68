#include "node/static_backend.h"

#include "common/codec.h"
#include "common/file.h"
#include "common/yaml_json.h"

namespace mgpu::node {

StaticBackend::StaticBackend(std::vector<Card> cards) : cards_(std::move(cards)) {}

Result<std::vector<Card>> StaticBackend::ParseCards(std::string_view yaml_text, std::string_view source) {
  const std::string where(source);
  auto docs = YamlDocumentsToJson(yaml_text);
  if (!docs.ok()) return Error{where + ": " + docs.message()};
  if (docs->size() != 1) return Error{where + ": expected one YAML document with a list of cards"};
  nlohmann::json cards = docs->front();
  if (cards.is_object() && cards.contains("cards")) cards = cards["cards"];
  if (!cards.is_array()) return Error{where + ": expected a list of cards (or a mapping with cards:)"};
  // The inventory codec validates the cards exactly as it does the annotation.
  const nlohmann::json inventory{
      {"cards", cards}, {"memoryUnitMiB", 1}, {"isolation", "none"}, {"version", ""}, {"heartbeat", 0}};
  auto decoded = DecodeInventory(inventory.dump());
  if (!decoded.ok()) {
    std::string message = decoded.message();
    const std::string_view prefix = "gpu-inventory: ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    return Error{where + ": " + message};
  }
  if (decoded->cards.empty()) return Error{where + ": lists no cards"};
  return std::move(decoded->cards);
}

Result<std::unique_ptr<StaticBackend>> StaticBackend::Load(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return Error{"cannot read the static GPU inventory file " + path};
  auto cards = ParseCards(*text, path);
  if (!cards.ok()) return cards.error();
  return std::make_unique<StaticBackend>(std::move(*cards));
}

Result<std::vector<GpuInfo>> StaticBackend::Discover() {
  std::lock_guard lock(mu_);
  std::vector<GpuInfo> out;
  for (const Card& c : cards_) out.push_back(GpuInfo{c, c.index, ""});
  return out;
}

Result<std::optional<HealthEvent>> StaticBackend::WaitHealthEvent(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!changed_.wait_for(lock, timeout, [&] { return !events_.empty(); }))
    return std::optional<HealthEvent>();
  HealthEvent e = std::move(events_.front());
  events_.pop_front();
  return std::optional<HealthEvent>(std::move(e));
}

void StaticBackend::SetHealthy(const std::string& uuid, bool healthy, std::string reason) {
  {
    std::lock_guard lock(mu_);
    for (Card& c : cards_) {
      if (c.uuid == uuid) c.healthy = healthy;
    }
    events_.push_back(HealthEvent{uuid, healthy, std::move(reason)});
  }
  changed_.notify_all();
}

}  // namespace mgpu::node
