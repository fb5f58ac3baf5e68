// The process-wide edge of the guard: clocks, the log, the settings read once from the environment, and what
// a fork's child forgets.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>

#include "guard/guard_internal.h"

extern char** environ;

namespace mgpu::guard {
namespace {

std::atomic<bool> g_logged[static_cast<int>(LogClass::kCount)];
bool g_log_enabled = false;

std::once_flag g_settings_once;
std::atomic<bool> g_settings_read{false};

void AfterForkInChild() {
  ForgetCardsInChild();
  ForgetAllocationsInChild();
  ForgetReaderInChild();
}

__attribute__((constructor)) void InitGuard() { pthread_atfork(nullptr, nullptr, AfterForkInChild); }

}  // namespace

Settings g_settings;

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);
}

void Log(LogClass cls, bool always, const char* format, ...) {
  if (!always && !g_log_enabled) return;
  if (g_logged[static_cast<int>(cls)].exchange(true)) return;
  char line[512];
  int n = snprintf(line, sizeof(line), "mgpu-guard pid=%d: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  if (n > 0 && n < static_cast<int>(sizeof(line)))
    n += vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n), format, args);
  va_end(args);
  if (n < 0) return;
  size_t len = n < static_cast<int>(sizeof(line)) - 1 ? static_cast<size_t>(n) : sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
}

const Settings& GetSettings() {
  if (g_settings_read.load(std::memory_order_acquire)) return g_settings;
  Once(g_settings_once, [] {
    Settings s;
    const char* why = ParseSettings(environ, s);
    g_log_enabled = s.log;
    if (*why) {
      // An absent MGPU_VISIBLE_CARDS is a process outside mgpu: say so only when asked.
      Log(LogClass::kStepAside, EnvValue(environ, "MGPU_VISIBLE_CARDS") != nullptr, "%s", why);
      return;
    }
    s.active = true;
    g_settings = s;
    Log(LogClass::kAttached, false,
        "guarding %d card(s) for container token=%s: cap %llu MiB per card, share %u", s.card_count, s.token,
        static_cast<unsigned long long>(s.cap_bytes / kMiB), s.share_percent);
  });
  g_settings_read.store(true, std::memory_order_release);
  return g_settings;
}

}  // namespace mgpu::guard
