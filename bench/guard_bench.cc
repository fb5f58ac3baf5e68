// The guard's speed, on the fake driver (no GPU needed; on a GPU node the same figures come from the real
// driver's side only through bench/RESULTS.md's PyTorch runs):
//   1. offline release: an online process launches every ~0.5 ms, an offline process's launch is held; the
//      online one stops. Measured: from the online process's last launch to the offline launch reaching the
//      driver (the release window: 100 ms, or --release-ms), N rounds, from the fake driver's launch log
//      (CLOCK_MONOTONIC).
//   2. per-call cost: launches and cuMemAlloc+cuMemFree pairs timed inside one process, with and without the
//      guard preloaded (the fake driver's own cost is in both); the launches also under fixed-share 100,
//      where the budgets are refilled from NVML every 20 ms, with the fake NVML's utilisation call taking
//      --nvml-delay-us (a real driver's takes milliseconds): the mean, and how many launches took over 1 ms.
// Usage: mgpu_guard_bench [--rounds N] [--calls N] [--release-ms MS] [--nvml-delay-us US]
//        mgpu_guard_bench --inner N   (the cost loop itself, in a process run with or without the guard)
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "guard/cuda_api.h"
#include "guard/state.h"

extern "C" {
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        CUstream, void**, void**);
}

namespace {

constexpr const char* kCard = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
using Env = std::map<std::string, std::string>;

pid_t Spawn(const std::vector<std::string>& args, const Env& env, const std::string& out_path) {
  std::vector<std::string> strings;
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename Done>
bool Until(Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool OfflineWaiting(const std::string& dir) {
  mgpu::guard::CardSnapshot card;
  std::string error;
  if (!mgpu::guard::ReadCardState(dir, kCard, card, error)) return false;
  for (const auto& c : card.containers) {
    if (c.token == "offline" && c.waiting > 0) return true;
  }
  return false;
}

// One round: returns the offline release delay in ms, or a negative number on failure.
double ReleaseRound(const std::string& dir, const Env& base) {
  std::filesystem::remove(dir + "/log");
  std::filesystem::remove(dir + "/stop");
  Env online = base;
  online["MGPU_CONTAINER_TOKEN"] = "online";
  online["FAKE_CUDA_TAG"] = "online";
  Env offline = base;
  offline["MGPU_CONTAINER_TOKEN"] = "offline";
  offline["FAKE_CUDA_TAG"] = "offline";
  offline["MGPU_QOS_LEVEL"] = "offline";
  offline.erase("MGPU_CORE_PERCENT");
  offline["MGPU_RECLAIMED_CORE_PERCENT"] = "100";
  const pid_t a = Spawn({MGPU_GUARD_PROBE, "launch-until", dir + "/stop"}, online, dir + "/a.out");
  if (!Until([&] { return std::filesystem::exists(dir + "/log"); })) return -1;
  const pid_t b = Spawn({MGPU_GUARD_PROBE, "launch", "1"}, offline, dir + "/b.out");
  const bool held = Until([&] { return OfflineWaiting(dir + "/cards"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // online keeps launching while offline waits
  std::ofstream(dir + "/stop") << "";
  Wait(a);
  Wait(b);
  if (!held) return -1;
  long long last_online = 0, offline_launch = 0;
  std::istringstream log(Read(dir + "/log"));
  std::string word, tag;
  long long ns = 0;
  while (log >> word >> tag >> ns) {
    if (tag == "online") last_online = std::max(last_online, ns);
    if (tag == "offline") offline_launch = ns;
  }
  if (!last_online || !offline_launch) return -1;
  return static_cast<double>(offline_launch - last_online) / 1e6;
}

double NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Inside one process (run with or without the guard): ns per launch and per cuMemAlloc+cuMemFree pair, and
// how many launches took over a millisecond.
int Inner(long calls) {
  double start = NowNs();
  long slow = 0;
  for (long i = 0; i < calls; ++i) {
    const double before = NowNs();
    cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    slow += NowNs() - before > 1e6;
  }
  const double launch = (NowNs() - start) / static_cast<double>(calls);
  start = NowNs();
  for (long i = 0; i < calls; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS) return 1;
    cuMemFree_v2(p);
  }
  const double pair = (NowNs() - start) / static_cast<double>(calls);
  std::printf("%.0f %.0f %ld\n", launch, pair, slow);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 10;
  long calls = 200000;
  const char* release_ms = nullptr;
  const char* nvml_delay_us = "0";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--calls")) calls = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--release-ms")) release_ms = argv[i + 1];
    if (!std::strcmp(argv[i], "--nvml-delay-us")) nvml_delay_us = argv[i + 1];
    if (!std::strcmp(argv[i], "--inner")) return Inner(std::atol(argv[i + 1]));
  }
  char tmp[] = "/tmp/mgpu-guard-bench-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  const std::string dir = tmp;
  std::filesystem::create_directories(dir + "/cards");
  const Env base = {{"LD_PRELOAD", MGPU_GUARD_LIBRARY},
                    {"LD_LIBRARY_PATH", MGPU_FAKE_DRIVER_DIR},
                    {"FAKE_CUDA_UUIDS", kCard},
                    {"FAKE_CUDA_LOG", dir + "/log"},
                    {"MGPU_VISIBLE_CARDS", kCard},
                    {"MGPU_MEMORY_MIB", "100000"},
                    {"MGPU_GUARD_STATE_DIR", dir + "/cards"},
                    {"MGPU_QOS_LEVEL", "online"},
                    {"MGPU_CORE_PERCENT", "100"},
                    {"MGPU_COMPUTE_POLICY", "native-burst-share"}};

  Env release = base;
  if (release_ms) release["MGPU_GUARD_RELEASE_MS"] = release_ms;
  std::vector<double> delays;
  for (int r = 0; r < rounds; ++r) {
    const double d = ReleaseRound(dir, release);
    if (d < 0) {
      std::fprintf(stderr, "guard_bench: round %d failed\n", r);
      continue;
    }
    delays.push_back(d);
  }
  std::sort(delays.begin(), delays.end());
  if (!delays.empty()) {
    std::printf(
        "offline release after online stops, window %s ms (ms, %zu rounds): min %.1f  median %.1f  max "
        "%.1f\n",
        release_ms ? release_ms : "100", delays.size(), delays.front(), delays[delays.size() / 2],
        delays.back());
  }

  for (const char* who : {"no guard", "guard", "fixed100"}) {
    const bool guarded = std::strcmp(who, "no guard") != 0;
    Env env = base;
    env.erase("FAKE_CUDA_LOG");
    env["MGPU_CONTAINER_TOKEN"] = std::string("cost-") + (guarded ? who : "none");
    env["FAKE_NVML_DELAY_US"] = nvml_delay_us;
    if (!guarded) env.erase("LD_PRELOAD");
    if (!std::strcmp(who, "fixed100")) env["MGPU_COMPUTE_POLICY"] = "fixed-share";
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return 1;
    self[n] = '\0';
    const pid_t p = Spawn({self, "--inner", std::to_string(calls)}, env, dir + "/cost.out");
    Wait(p);
    double launch = 0, pair = 0;
    long slow = 0;
    std::istringstream(Read(dir + "/cost.out")) >> launch >> pair >> slow;
    std::printf(
        "%-10s launch %6.0f ns (%ld over 1 ms)   cuMemAlloc+cuMemFree %6.0f ns   (%ld calls each; NVML call "
        "%s us)\n",
        who, launch, slow, pair, calls, nvml_delay_us);
  }
  std::filesystem::remove_all(dir);
  return delays.size() == static_cast<size_t>(rounds) ? 0 : 1;
}
