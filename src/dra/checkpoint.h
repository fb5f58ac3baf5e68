// The prepared-claims state (docs/dra.md §1): every claim NodePrepareResources answered, with what it
// answered, in a checkpoint file that survives daemon restarts and that the instances of a rolling update
// share (§1, "Upgrades"): the kubelet may prepare a claim through one instance and unprepare it through the
// other. So the file is the state: every read reads it, and every change is a read-modify-write under a lock
// on <checkpoint>.lock (flock, exclusive; reads take it shared) that every thread of every instance takes, so
// neither instance loses the other's claims. Every change is written through (a temporary file, synced,
// renamed over the checkpoint) before the call returns, so a claim the kubelet was told is prepared is on
// disk. The file carries a version and a checksum of its claims; a file that fails either is an error, never
// silently an empty state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/daemon.h"
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

  // The checkpoint held for one read-modify-write that no other thread or instance interleaves with (for
  // example writing a claim's CDI spec and recording the claim): the claims as stored when it was taken,
  // changed through Add and Remove, each written before it returns. Released when destroyed.
  class Held {
   public:
    const std::map<std::string, PreparedClaim>& claims() const { return claims_; }
    std::optional<PreparedClaim> Find(const std::string& uid) const;
    // Records (or replaces) a claim and writes the checkpoint; on error nothing changed.
    Status Add(PreparedClaim claim);
    // Forgets a claim and writes the checkpoint; an unknown UID is already forgotten.
    Status Remove(const std::string& uid);

   private:
    friend class PreparedClaims;
    Held(const PreparedClaims& owner, FileLock lock, std::map<std::string, PreparedClaim> claims)
        : owner_(owner), lock_(std::move(lock)), claims_(std::move(claims)) {}
    Status Write(std::map<std::string, PreparedClaim> next);

    const PreparedClaims& owner_;
    FileLock lock_;
    std::map<std::string, PreparedClaim> claims_;
  };
  // Waits for the lock (held by another instance only for one change); an unreadable or corrupt file is an
  // error naming it.
  Result<Held> Hold() const;

  // Reads of the checkpoint as stored now. A file that cannot be read now (it could at Open, and every write
  // is atomic) answers with the claims last read, and the error is logged.
  std::optional<PreparedClaim> Find(const std::string& uid) const;
  std::vector<PreparedClaim> All() const;
  // One change, held for its read-modify-write (see Held).
  Status Add(PreparedClaim claim);
  Status Remove(const std::string& uid);

  const std::string& path() const { return path_; }

 private:
  explicit PreparedClaims(std::string path) : path_(std::move(path)) {}
  Result<std::map<std::string, PreparedClaim>> Read(FileLock::Mode mode, std::optional<FileLock>& lock) const;
  std::map<std::string, PreparedClaim> Stored() const;

  const std::string path_;
  mutable std::mutex mu_;
  mutable std::map<std::string, PreparedClaim> last_read_;  // by UID; under mu_
};

}  // namespace mgpu::dra
