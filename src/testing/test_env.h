// Small test helpers shared by integration tests: a temporary directory removed on destruction, a free
// port, and waiting for a condition with a deadline (never a fixed sleep standing in for synchronisation).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace mgpu::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents when this goes out of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

// A port on 127.0.0.1 nothing listens on: bound, read and closed (never listened on, so no connection can
// queue there), for a program that cannot report the port it picked; -1 when none could be had.
int FreePort();

// Polls `done` until it returns true or `timeout` passes; returns its last answer. The timeout bounds a
// failure, it is not an assertion about speed.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace mgpu::testing
