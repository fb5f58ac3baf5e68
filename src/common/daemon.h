// What both daemons' main() do alike: read flags, wait for a termination signal, and exit with the same
// codes.
#pragma once

#include <signal.h>

#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace mgpu {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitConfig = 3;
inline constexpr int kExitNoGpuBackend = 4;
inline constexpr int kExitServe = 5;

// Parses `--name VALUE` flags (names in `with_value`) and `--name` switches (in `switches`, stored as "1")
// into `out`. False on an unknown flag or a missing value.
bool ParseFlags(int argc, char** argv, const std::vector<std::string>& with_value,
                const std::vector<std::string>& switches, std::map<std::string, std::string>& out);

// SIGTERM and SIGINT, blocked from construction on so that every thread started later inherits the mask and
// the signal reaches Wait() alone. Construct it before starting any thread.
class TerminationSignals {
 public:
  TerminationSignals();
  // Blocks until one of the signals arrives; returns it.
  int Wait();

 private:
  sigset_t set_;
};

// A lock on a file (flock), held until the process exits or Release. Exclusive: how a node daemon makes sure it
// is the only one serving the node's cards (docs/dra.md §1). Shared: how DRA instances of a rolling update
// (each with its own instance id) serve together while still keeping out a daemon that takes it exclusively.
// Creates the file and its folder.
class FileLock {
 public:
  enum class Mode { kExclusive, kShared };
  // Fails at once, with one sentence naming `holder_hint`, when another process (or another lock in this one)
  // holds it in a mode that conflicts.
  static Result<FileLock> Take(const std::string& path, const std::string& holder_hint,
                               Mode mode = Mode::kExclusive);
  // Waits for the lock as long as it is held in a conflicting mode.
  static Result<FileLock> Wait(const std::string& path, Mode mode);
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() { Release(); }
  void Release();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  static Result<FileLock> Lock(const std::string& path, int operation, const std::string& holder_hint);
  int fd_ = -1;
};

}  // namespace mgpu
