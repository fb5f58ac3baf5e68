#include "common/daemon.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

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

Result<FileLock> FileLock::Lock(const std::string& path, int operation, const std::string& holder_hint) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"cannot open the lock file " + path + ": " + std::strerror(errno)};
  int rc;
  do rc = flock(fd, operation);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) return Error{path + " is locked: " + holder_hint};
    return Error{"cannot lock " + path + ": " + std::strerror(err)};
  }
  return FileLock(fd);
}

Result<FileLock> FileLock::Take(const std::string& path, const std::string& holder_hint, Mode mode) {
  return Lock(path, (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | LOCK_NB, holder_hint);
}

Result<FileLock> FileLock::Wait(const std::string& path, Mode mode) {
  return Lock(path, mode == Mode::kShared ? LOCK_SH : LOCK_EX, "");
}

void FileLock::Release() {
  if (fd_ < 0) return;
  close(fd_);  // drops the flock
  fd_ = -1;
}

}  // namespace mgpu
