// The prepared-claims state (docs/dra.md §1): every claim NodePrepareResources answered, with what it
// answered, kept in memory under one mutex and in a checkpoint file that survives daemon restarts. Every
// change is written through (a temporary file, synced, renamed over the checkpoint) before the call returns,
// so a claim the kubelet was told is prepared is on disk. The file carries a version and a checksum of its
// claims; a file that fails either is an error, never silently an empty state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace mgpu::dra {

// One Device of a NodePrepareResources answer.
struct PreparedDevice {
  std::vector<std::string> requests;
  std::string pool;
  std::string device;
  std::string share_id;  // empty for a device that is not shared
  std::vector<std::string> cdi_ids;
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string uid;
  std::string ns;
  std::string name;
  std::vector<PreparedDevice> devices;
  std::string cdi_spec;  // the spec file's path
  bool operator==(const PreparedClaim&) const = default;
};

// The checkpoint's text for `claims`, and back (errors name what is wrong with the text).
std::string EncodeCheckpoint(const std::map<std::string, PreparedClaim>& claims);
Result<std::map<std::string, PreparedClaim>> DecodeCheckpoint(const std::string& text);

class PreparedClaims {
 public:
  // Loads `path` when it exists (a directory that does not exist is created); an unreadable or corrupt file
  // is an error naming it.
  static Result<std::unique_ptr<PreparedClaims>> Open(const std::string& path);

  std::optional<PreparedClaim> Find(const std::string& uid) const;
  std::vector<PreparedClaim> All() const;
  // Records (or replaces) a claim and writes the checkpoint; on error nothing changed.
  Status Add(PreparedClaim claim);
  // Forgets a claim and writes the checkpoint; an unknown UID is already forgotten.
  Status Remove(const std::string& uid);

 private:
  explicit PreparedClaims(std::string path) : path_(std::move(path)) {}
  Status WriteLocked(const std::map<std::string, PreparedClaim>& claims) const;

  const std::string path_;
  mutable std::mutex mu_;
  std::map<std::string, PreparedClaim> claims_;  // by UID
};

}  // namespace mgpu::dra
