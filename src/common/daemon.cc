#include "common/daemon.h"

#include <pthread.h>

#include <algorithm>

namespace mgpu {

bool ParseFlags(int argc, char** argv, const std::vector<std::string>& with_value,
                const std::vector<std::string>& switches, std::map<std::string, std::string>& out) {
  const auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) return false;
    const std::string name = a.substr(2);
    if (has(switches, name)) {
      out[name] = "1";
    } else if (has(with_value, name) && i + 1 < argc) {
      out[name] = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

TerminationSignals::TerminationSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int TerminationSignals::Wait() {
  int signal = 0;
  sigwait(&set_, &signal);
  return signal;
}

}  // namespace mgpu
