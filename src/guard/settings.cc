#include "guard/settings.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace mgpu::guard {
namespace {

constexpr uint64_t kMiB = 1 << 20;

bool ParseUint(const char* text, uint64_t max, uint64_t& out) {
  if (!text || !*text || text[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return false;
  out = v;
  return true;
}

bool TokenValid(const char* t) {
  const size_t n = strlen(t);
  if (n == 0 || n >= kTokenBytes) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = t[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  }
  return true;
}

}  // namespace

const char* EnvValue(const char* const* environment, const char* name) {
  if (!environment) return nullptr;
  const size_t n = strlen(name);
  for (const char* const* e = environment; *e; ++e) {
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

const char* ParseSettings(const char* const* environment, Settings& s) {
  const auto env = [&](const char* name) { return EnvValue(environment, name); };
  const char* log = env("MGPU_GUARD_LOG");
  s.log = log && *log && strcmp(log, "0") != 0;
  const char* cards = env("MGPU_VISIBLE_CARDS");
  if (!cards || !*cards) return "MGPU_VISIBLE_CARDS is not set, so the guard steps aside";
  for (const char* p = cards; *p;) {
    const char* comma = strchr(p, ',');
    const size_t len = comma ? static_cast<size_t>(comma - p) : strlen(p);
    if (len == 0 || len >= kUuidBytes || s.card_count == kMaxCards || memchr(p, '/', len))
      return "MGPU_VISIBLE_CARDS is not a list of card UUIDs, so the guard steps aside";
    memcpy(s.cards[s.card_count++], p, len);
    p += len + (comma ? 1 : 0);
  }
  uint64_t mib = 0;
  if (!ParseUint(env("MGPU_MEMORY_MIB"), uint64_t{1} << 30, mib) || mib == 0)
    return "MGPU_MEMORY_MIB is missing or not a positive whole number, so the guard steps aside";
  s.cap_bytes = mib * kMiB;
  const char* token = env("MGPU_CONTAINER_TOKEN");
  if (!token || !TokenValid(token))
    return "MGPU_CONTAINER_TOKEN is missing or not a token of letters, digits, '-' and '_', so the guard "
           "steps aside";
  strcpy(s.token, token);
  const char* qos = env("MGPU_QOS_LEVEL");
  if (qos && strcmp(qos, "offline") == 0) {
    s.qos = QosLevel::kOffline;
  } else if (qos && *qos && strcmp(qos, "online") != 0) {
    return "MGPU_QOS_LEVEL must be online or offline, so the guard steps aside";
  }
  const char* share_var = s.qos == QosLevel::kOnline ? "MGPU_CORE_PERCENT" : "MGPU_RECLAIMED_CORE_PERCENT";
  if (const char* share = env(share_var)) {
    uint64_t v = 0;
    if (!ParseUint(share, 100, v))
      return "the core percent is not a whole number from 0 to 100, so the guard steps aside";
    s.share_percent = static_cast<uint32_t>(v);
  }
  const char* policy = env("MGPU_COMPUTE_POLICY");
  if (!policy || !*policy || strcmp(policy, "fixed-share") == 0) {
    s.policy = SharePolicy::kFixedShare;
  } else if (strcmp(policy, "guaranteed-burst-share") == 0) {
    s.policy = SharePolicy::kGuaranteedBurstShare;
  } else if (strcmp(policy, "native-burst-share") == 0) {
    s.policy = SharePolicy::kNativeBurstShare;
  } else {
    return "MGPU_COMPUTE_POLICY is not fixed-share, guaranteed-burst-share or native-burst-share, so the "
           "guard steps aside";
  }
  if (const char* dir = env("MGPU_GUARD_STATE_DIR")) {
    if (!*dir || strlen(dir) >= sizeof(s.state_dir))
      return "MGPU_GUARD_STATE_DIR is empty or too long, so the guard steps aside";
    strcpy(s.state_dir, dir);
  }
  if (const char* ms = env("MGPU_GUARD_RELEASE_MS")) {
    uint64_t v = 0;
    if (!ParseUint(ms, 600'000, v))
      return "MGPU_GUARD_RELEASE_MS is not a whole number of milliseconds, so the guard steps aside";
    s.release_ns = v * 1'000'000ULL;
  }
  return "";
}

}  // namespace mgpu::guard
