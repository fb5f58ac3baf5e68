// The container's settings as the guard reads them from its environment (README, "Isolation"): which cards,
// the memory cap, the compute share and policy, the QoS, the container token, where the state lives, the
// offline release window. Plain code: it reads only the environment block it is given, allocates nothing and
// never fails loudly; what is wrong comes back as one sentence, and then the guard steps aside.
#pragma once

#include <cstdint>

#include "guard/state.h"

namespace mgpu::guard {

inline constexpr int kMaxCards = 16;
inline constexpr uint64_t kDefaultReleaseNs = 100'000'000;

struct Settings {
  bool active = false;  // set by the guard once the settings are usable
  bool log = false;     // MGPU_GUARD_LOG: one stderr line per decision class
  int card_count = 0;
  char cards[kMaxCards][kUuidBytes] = {};
  uint64_t cap_bytes = 0;
  uint32_t share_percent = 0;  // MGPU_CORE_PERCENT online, MGPU_RECLAIMED_CORE_PERCENT offline; 0: none
  QosLevel qos = QosLevel::kOnline;
  SharePolicy policy = SharePolicy::kFixedShare;
  char token[kTokenBytes] = {};
  char state_dir[512] = "/var/lib/mgpu/cards";
  uint64_t release_ns = kDefaultReleaseNs;  // offline waits until online has been idle this long
};

// The value of `name` in `environment` (a NULL-terminated array of "NAME=value", like `environ`), or nullptr.
const char* EnvValue(const char* const* environment, const char* name);

// Fills `out` from `environment`. Returns "" when the settings are usable, else the sentence saying what is
// wrong and that the guard steps aside.
const char* ParseSettings(const char* const* environment, Settings& out);

}  // namespace mgpu::guard
