// What both daemons' main() do alike: read flags, wait for a termination signal, and exit with the same
// codes.
#pragma once

#include <signal.h>

#include <map>
#include <string>
#include <vector>

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

}  // namespace mgpu
