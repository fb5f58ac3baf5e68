#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mgpu {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteFileAtomically(const std::string& path, const std::string& text, unsigned mode) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return Error{"cannot write " + tmp + ": " + std::strerror(errno)};
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && fchmod(fd, static_cast<mode_t>(mode)) != 0) err = errno;
  if (err == 0 && fsync(fd) != 0) err = errno;
  close(fd);
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    return Error{"cannot write " + path + ": " + std::strerror(err)};
  }
  return Status::Ok();
}

}  // namespace mgpu
