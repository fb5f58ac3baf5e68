// What NodePrepareResources and NodeUnprepareResources do for one claim (docs/dra.md §1, §4, §5), apart from
// the wire: read the claim once from the API server (never for a claim already prepared), check its
// allocation, write its CDI spec, record it in the prepared-claims state; and the reverse. Idempotent and
// safe to call concurrently: calls for one claim UID run one at a time, calls for different claims in
// parallel, and beside the other instance of a rolling update on the same checkpoint and CDI folder (a
// claim's spec is written and its claim recorded with the checkpoint held). Every refusal is one sentence naming the claim.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/dra.h"
#include "common/result.h"
#include "dra/checkpoint.h"
#include "dra/devices.h"
#include "node/device_state.h"

namespace mgpu::dra {

// The claim as the kubelet names it.
struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;
};

// Where claims are read from: the API server (one GET per call), or a test's own objects.
class ClaimReader {
 public:
  virtual ~ClaimReader() = default;
  virtual Result<nlohmann::json> GetClaim(const std::string& ns, const std::string& name) = 0;
};

// A claim's allocation on this node, read from the ResourceClaim object: its devices of the driver (in result
// order) and the answer to give the kubelet for them (the first device carries the claim's CDI ID).
struct ClaimAllocation {
  std::vector<AllocatedDevice> devices;
  std::vector<PreparedDevice> answer;
};
// Checks that `claim` is the one `ref` names (UID), is allocated, and that every result of the driver is a
// device of this node's pool on a known, healthy card of `cards`, all for one request.
Result<ClaimAllocation> ReadClaimAllocation(const nlohmann::json& claim, const ClaimRef& ref,
                                            const std::string& node, const std::vector<NodeCard>& cards,
                                            const Config& config);

struct PrepareOutcome {
  std::vector<PreparedDevice> devices;
  std::string error;  // non-empty: not prepared, nothing written
};

class Preparer {
 public:
  // `cards` are the node's cards as published; `health` gives their current health; all must outlive this.
  Preparer(const Config& config, std::string node, std::vector<NodeCard> cards,
           const node::DeviceState& health, PreparedClaims& claims, ClaimReader& reader);

  PrepareOutcome Prepare(const ClaimRef& claim);
  // "" when unprepared (or never prepared); else why not.
  std::string Unprepare(const ClaimRef& claim);
  // Removes CDI specs of this driver that no prepared claim owns (a crash between writing a spec and
  // recording its claim); returns how many. Called once at start, before serving.
  int RemoveOrphanSpecs();

  uint64_t claim_reads() const { return claim_reads_; }

 private:
  class Turn;  // holds one claim UID's turn
  PrepareOutcome PrepareNew(const ClaimRef& claim);

  const Config& config_;
  const std::string node_;
  const std::vector<NodeCard> cards_;
  const node::DeviceState& health_;
  PreparedClaims& claims_;
  ClaimReader& reader_;
  std::atomic<uint64_t> claim_reads_{0};
  std::mutex mu_;
  std::condition_variable turn_done_;
  std::set<std::string> busy_;  // claim UIDs being prepared or unprepared
};

}  // namespace mgpu::dra
