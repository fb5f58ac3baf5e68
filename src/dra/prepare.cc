#include "dra/prepare.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json_path.h"
#include "dra/cdi.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;

std::string Who(const ClaimRef& c) { return c.ns + "/" + c.name; }

}  // namespace

Result<ClaimAllocation> ReadClaimAllocation(const json& claim, const ClaimRef& ref, const std::string& node,
                                            const std::vector<NodeCard>& cards, const Config& config) {
  const std::string who = "claim " + Who(ref);
  const std::string uid = MetadataString(claim, "uid");
  if (uid != ref.uid)
    return Error{who + " has UID " + uid + ", not the " + ref.uid +
                 " the kubelet asked about (it was deleted and made again)"};
  const json* results = FindPath(claim, {"status", "allocation", "devices", "results"});
  if (results == nullptr || !results->is_array()) return Error{who + " is not allocated"};
  Result<std::optional<ClaimFacts>> read = ReadClaim(claim, config);
  if (!read.ok()) return read.error();
  if (!*read) return Error{who + " has no device of driver " + DriverName(config) + " allocated"};
  const ClaimFacts& facts = **read;
  if (facts.node != node)
    return Error{who + " was allocated " + facts.names.front().device + " of pool " + facts.node +
                 ", not of this node's pool " + node};
  ClaimAllocation out;
  for (size_t i = 0; i < facts.devices.size(); ++i) {
    const AllocatedDevice& d = facts.devices[i];
    const ClaimFacts::Named& name = facts.names[i];
    const NodeCard* card = FindCard(cards, d.device.card_index);
    if (card == nullptr)
      return Error{who + " was allocated " + name.device + ", which is not a device of node " + node};
    if (!card->card.healthy)
      return Error{who + " was allocated " + name.device + " on card " + card->card.uuid +
                   ", which is unhealthy"};
    if (name.request != facts.names.front().request)
      return Error{who + " has devices of " + DriverName(config) + " for two requests (" +
                   facts.names.front().request + ", " + name.request + "); one claim is one share"};
    out.devices.push_back(AllocatedDevice{d.device, d.consumed, card->capacity_mib});
    out.answer.push_back(PreparedDevice{{name.request}, node, name.device, name.share_id, {}});
  }
  out.answer.front().cdi_ids.push_back(CdiDeviceId(ref.uid, config));
  return out;
}

class Preparer::Turn {
 public:
  Turn(Preparer& p, const std::string& uid) : p_(p), uid_(uid) {
    std::unique_lock lock(p_.mu_);
    p_.turn_done_.wait(lock, [&] { return !p_.busy_.count(uid_); });
    p_.busy_.insert(uid_);
  }
  ~Turn() {
    {
      std::lock_guard lock(p_.mu_);
      p_.busy_.erase(uid_);
    }
    p_.turn_done_.notify_all();
  }

 private:
  Preparer& p_;
  const std::string uid_;
};

Preparer::Preparer(const Config& config, std::string node, std::vector<NodeCard> cards,
                   const node::DeviceState& health, PreparedClaims& claims, ClaimReader& reader)
    : config_(config),
      node_(std::move(node)),
      cards_(std::move(cards)),
      health_(health),
      claims_(claims),
      reader_(reader) {}

PrepareOutcome Preparer::Prepare(const ClaimRef& claim) {
  if (claim.uid.empty() || claim.name.empty())
    return {{}, "the kubelet named a claim without UID or name (namespace " + claim.ns + ")"};
  Turn turn(*this, claim.uid);
  if (auto done = claims_.Find(claim.uid)) return {done->devices, ""};
  return PrepareNew(claim);
}

PrepareOutcome Preparer::PrepareNew(const ClaimRef& ref) {
  claim_reads_++;
  Result<json> object = reader_.GetClaim(ref.ns, ref.name);
  if (!object.ok()) return {{}, "cannot read claim " + Who(ref) + ": " + object.message()};
  std::vector<NodeCard> cards = cards_;
  for (const Card& c : health_.Cards()) {
    for (NodeCard& n : cards) {
      if (n.card.uuid == c.uuid) n.card.healthy = c.healthy;
    }
  }
  auto allocation = ReadClaimAllocation(*object, ref, node_, cards, config_);
  if (!allocation.ok()) return {{}, allocation.message()};
  auto share = ShareOf(allocation->devices, config_, Who(ref));
  if (!share.ok()) return {{}, share.message()};

  std::vector<Card> held;
  std::vector<std::string> nodes;
  for (const AllocatedDevice& d : allocation->devices) {
    const NodeCard& c = *FindCard(cards, d.device.card_index);
    held.push_back(c.card);
    for (const std::string& n : c.device_nodes) {
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
    }
  }
  std::sort(held.begin(), held.end(), [](const Card& a, const Card& b) { return a.index < b.index; });
  const bool offline = share->qos == Qos::kOffline;
  const auto environment =
      node::BuildContainerEnvironment(held, offline ? Resource::kReclaimedCore : Resource::kCore,
                                      offline ? share->reclaimed_core_per_card : share->core_per_card,
                                      share->memory_per_card_mib, config_.isolation, share->policy, ref.uid);
  const std::string path = CdiSpecPath(ref.uid, config_);
  // The spec written and the claim recorded with the checkpoint held: the other instance of a rolling update
  // may have prepared the claim meanwhile (its answer stands), and its start's removal of CDI specs of no
  // prepared claim must not fall between the two.
  auto checkpoint = claims_.Hold();
  if (!checkpoint.ok()) return {{}, "claim " + Who(ref) + ": " + checkpoint.message()};
  if (auto done = checkpoint->Find(ref.uid)) return {done->devices, ""};
  if (Status s = WriteCdiSpec(path, CdiSpec(ref.uid, environment, nodes, config_)); !s.ok())
    return {{}, "claim " + Who(ref) + ": " + s.message()};
  PreparedClaim record{ref.uid, ref.ns, ref.name, allocation->answer, path};
  if (Status s = checkpoint->Add(record); !s.ok()) {
    (void)RemoveCdiSpec(path);
    return {{}, "claim " + Who(ref) + ": " + s.message()};
  }
  std::string uuids;
  for (const Card& c : held) uuids += (uuids.empty() ? "" : ",") + c.uuid;
  spdlog::info("claim={} uid={} card={} qos={} policy={} core_per_card={} memory_mib={} prepared", Who(ref),
               ref.uid, uuids, Name(share->qos), Name(share->policy),
               offline ? share->reclaimed_core_per_card : share->core_per_card, share->memory_per_card_mib);
  return {allocation->answer, ""};
}

std::string Preparer::Unprepare(const ClaimRef& claim) {
  Turn turn(*this, claim.uid);
  auto held = claims_.Hold();
  if (!held.ok()) return "claim " + Who(claim) + ": " + held.message();
  const auto done = held->Find(claim.uid);
  if (Status s = held->Remove(claim.uid); !s.ok()) return "claim " + Who(claim) + ": " + s.message();
  const std::string path = done ? done->cdi_spec : CdiSpecPath(claim.uid, config_);
  if (Status s = RemoveCdiSpec(path); !s.ok()) return "claim " + Who(claim) + ": " + s.message();
  if (done) spdlog::info("claim={} uid={} unprepared", Who(claim), claim.uid);
  return "";
}

int Preparer::RemoveOrphanSpecs() {
  auto held = claims_.Hold();  // so that no other instance records a claim between its spec and this check
  if (!held.ok()) {
    spdlog::error("no CDI spec removed: {}", held.message());
    return 0;
  }
  int removed = 0;
  for (const std::string& uid : ListCdiSpecs(config_)) {
    if (held->Find(uid)) continue;
    if (RemoveCdiSpec(CdiSpecPath(uid, config_)).ok()) {
      spdlog::info("uid={} CDI spec of no prepared claim removed", uid);
      removed++;
    }
  }
  return removed;
}

}  // namespace mgpu::dra
