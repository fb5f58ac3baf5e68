// The guard under test: the probe program (one process of a container) runs with libmgpu-guard.so preloaded
// over the fake driver and the fake NVML; the test reads the card's state file as the plugin's /metrics does.
// Processes synchronise through files and the state; nothing here waits on a clock to decide an outcome.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "guard/state.h"

namespace mgpu::guard {
namespace {

constexpr const char* kCard = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
using Env = std::map<std::string, std::string>;

struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string err_path;
};

struct Output {
  std::vector<std::string> lines;
  std::string err;
  int status = -1;
};

class GuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/mgpu-guard-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::filesystem::create_directories(Path("cards"));  // the plugin makes it on a node
    base_ = {{"LD_PRELOAD", MGPU_GUARD_LIBRARY},
             {"LD_LIBRARY_PATH", MGPU_FAKE_DRIVER_DIR},
             {"FAKE_CUDA_UUIDS", kCard},
             {"FAKE_CUDA_TOTAL_MIB", "1000"},
             {"FAKE_NVML_UTIL_FILE", Path("util")},
             {"MGPU_VISIBLE_CARDS", kCard},
             {"MGPU_MEMORY_MIB", "100"},
             {"MGPU_CONTAINER_TOKEN", "container-a"},
             {"MGPU_GUARD_STATE_DIR", Path("cards")},
             {"MGPU_QOS_LEVEL", "online"},
             {"MGPU_CORE_PERCENT", "30"},
             {"MGPU_COMPUTE_POLICY", "native-burst-share"}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  Child Start(const std::vector<std::string>& args, const Env& overrides = {}) {
    Env env = base_;
    for (const auto& [k, v] : overrides) {
      if (v.empty()) {
        env.erase(k);
      } else {
        env[k] = v;
      }
    }
    std::vector<std::string> strings;
    for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string probe = MGPU_GUARD_PROBE;
    argv.push_back(probe.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    Child c;
    c.err_path = Path("stderr-" + std::to_string(++children_));
    c.pid = fork();
    if (c.pid == 0) {
      dup2(pipe_fds[1], 1);
      const int err = open(c.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(pipe_fds[0]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    c.out = pipe_fds[0];
    return c;
  }

  Output Finish(Child c) {
    Output o;
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = read(c.out, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    close(c.out);
    waitpid(c.pid, &o.status, 0);
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) o.lines.push_back(line);
    std::ifstream err(c.err_path);
    std::stringstream e;
    e << err.rdbuf();
    o.err = e.str();
    return o;
  }

  Output Run(const std::vector<std::string>& args, const Env& overrides = {}) {
    Child c = Start(args, overrides);
    last_pid_ = c.pid;
    return Finish(c);
  }
  // The pid of the process Run ran last (for the output `o` it gave).
  pid_t WaitPid(const Output&) const { return last_pid_; }

  void Touch(const std::string& name) { std::ofstream(Path(name)) << ""; }

  void SetUtil(const std::string& text) {
    std::ofstream(Path("util.tmp")) << text;
    std::filesystem::rename(Path("util.tmp"), Path("util"));
  }

  std::optional<ContainerSnapshot> Container(const std::string& token) {
    CardSnapshot card;
    std::string error;
    if (!ReadCardState(Path("cards"), kCard, card, error)) return std::nullopt;
    for (const auto& c : card.containers) {
      if (c.token == token) return c;
    }
    return std::nullopt;
  }

  // The raw record of `token`, also after its processes are gone.
  std::optional<ContainerRecord> Record(const std::string& token) {
    auto file = std::make_unique<StateFile>();
    std::ifstream in(StatePath(Path("cards"), kCard), std::ios::binary);
    in.read(reinterpret_cast<char*>(file.get()), sizeof(StateFile));
    for (const ContainerRecord& r : file->containers) {
      if (r.in_use && token == r.token) return r;
    }
    return std::nullopt;
  }

  // Polls `done` (another process's progress) for up to 20 seconds.
  // Waits until container-a's launch waits for its share with `util` percent measured.
  bool HeldWith(uint32_t util) {
    return Eventually([&] {
      auto c = Container("container-a");
      return c && c->waiting == 1 && c->throttled >= 1 && c->util_percent == util;
    });
  }

  // Lets a launch-until process go (its share refills once NVML shows nothing) and checks it exits cleanly.
  void StopLaunching(Child& busy) {
    SetUtil("");
    Touch("stop");
    EXPECT_EQ(Finish(busy).status, 0);
  }

  static bool Eventually(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

  std::string dir_;
  Env base_;
  int children_ = 0;
  pid_t last_pid_ = -1;
};

using Lines = std::vector<std::string>;

TEST_F(GuardTest, TheCapIsReachedExactly) {
  auto o = Run({"alloc", "60", "alloc", "40", "info", "alloc", "1", "managed", "1", "async", "1", "pool", "1",
                "create", "1", "legacy", "1"});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 0", "info 0 100 0", "alloc 2", "managed 2", "async 2", "pool 2",
                            "create 2", "legacy 2"}))
      << o.err;
}

TEST_F(GuardTest, MemGetInfoReportsTheSlice) {
  auto o = Run({"info", "alloc", "30", "info"});
  EXPECT_EQ(o.lines, (Lines{"info 100 100 0", "alloc 0", "info 70 100 0"}));
}

TEST_F(GuardTest, FreesReturnTheBudgetOnEveryPath) {
  // Each kind fills the cap, the next allocation fails, its free makes room again.
  for (const Lines& kind :
       {Lines{"alloc", "100"}, Lines{"managed", "100"}, Lines{"async", "100"}, Lines{"pool", "100"},
        Lines{"create", "100"}, Lines{"legacy", "100"}, Lines{"array", "5120", "5120"},
        Lines{"array3d", "1024", "1024", "25"}, Lines{"pitch", "40960", "2560"},
        Lines{"legacy-pitch", "40960", "2560"}, Lines{"legacy-array", "5120", "5120"},
        Lines{"legacy-array3d", "1024", "1024", "25"}}) {
    std::vector<std::string> args = kind;
    for (const char* a : {"alloc", "1", "free", "0", "alloc", "100", "free", "2", "info"}) args.push_back(a);
    auto o = Run(args);
    ASSERT_EQ(o.lines.size(), 6u) << kind[0] << o.err;
    EXPECT_EQ(o.lines[0], kind[0] + " 0");
    EXPECT_EQ(o.lines[1], "alloc 2") << kind[0];
    EXPECT_EQ(o.lines[2], "free 0");
    EXPECT_EQ(o.lines[3], "alloc 0") << kind[0];
    EXPECT_EQ(o.lines[5], "info 100 100 0") << kind[0];
  }
}

TEST_F(GuardTest, ProcessesOfOneContainerShareTheCap) {
  auto first = Start({"alloc", "60", "touch", Path("a"), "wait", Path("b"), "info"});
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(Path("a")); }));
  auto c = Container("container-a");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->used_bytes, 60u << 20);
  EXPECT_EQ(c->cap_bytes, 100u << 20);
  auto second = Run({"alloc", "50", "alloc", "40", "info"});
  EXPECT_EQ(second.lines, (Lines{"alloc 2", "alloc 0", "info 0 100 0"}));
  // Another container on the card has its own cap.
  auto other = Run({"alloc", "100"}, {{"MGPU_CONTAINER_TOKEN", "container-b"}});
  EXPECT_EQ(other.lines, (Lines{"alloc 0"}));
  Touch("b");
  EXPECT_EQ(Finish(first).lines, (Lines{"alloc 0", "info 40 100 0"}));
}

TEST_F(GuardTest, EachVisibleCardHasItsOwnCapAndOtherDevicesPassThrough) {
  const std::string second = "GPU-ffffffff-0000-1111-2222-333344445555";
  const std::string stranger = "GPU-eeeeeeee-0000-1111-2222-333344445555";
  auto o = Run({"device", "1", "alloc", "100", "alloc", "1", "device", "0", "alloc", "100", "alloc", "1",
                "device", "2", "alloc", "500", "info"},
               {{"FAKE_CUDA_UUIDS", std::string(kCard) + "," + second + "," + stranger},
                {"MGPU_VISIBLE_CARDS", std::string(kCard) + "," + second}});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "alloc 0", "alloc 2", "alloc 0", "info 300 1000 0"}))
      << o.err;
}

TEST_F(GuardTest, TheLogSaysEachDecisionOncePerProcess) {
  auto o = Run({"alloc", "100", "alloc", "1", "alloc", "1"}, {{"MGPU_GUARD_LOG", "1"}});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "alloc 2"}));
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = o.err.find(what); at != std::string::npos; at = o.err.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("guarding 1 card(s) for container token=container-a"), 1u) << o.err;
  EXPECT_EQ(count("would pass the cap"), 1u) << o.err;
  EXPECT_EQ(count("\n"), 2u) << o.err;
  EXPECT_EQ(Run({"alloc", "100", "alloc", "1"}).err, "");  // silent unless asked
}

TEST_F(GuardTest, AForkedChildIsAProcessOfItsOwnInTheContainer) {
  auto o = Run({"alloc", "60", "fork-alloc", "50", "fork-alloc", "40", "info", "alloc", "40", "info"});
  // The second child's 40 MiB die with it: cuMemGetInfo and the next allocation see them free again.
  EXPECT_EQ(o.lines,
            (Lines{"alloc 0", "child alloc 2", "child alloc 0", "info 40 100 0", "alloc 0", "info 0 100 0"}))
      << o.err;
}

TEST_F(GuardTest, CuGetProcAddressIsIntercepted) {
  // As CUDA 12 and 13 runtimes ask: either lookup function, their versions, with and without the
  // per-thread-stream flag.
  for (const char* path : {"getproc", "getproc2"}) {
    for (const char* version : {"12000", "13000"}) {
      for (const char* flags : {"0", "2"}) {
        auto o = Run({"path", path, version, flags, "alloc", "80", "alloc", "30", "create", "30", "info"});
        EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "create 2", "info 20 100 0"}))
            << path << " " << version << " " << flags << o.err;
      }
    }
  }
}

TEST_F(GuardTest, EveryHookedEntryPointIsTheGuardsHoweverItIsFound) {
  // dlsym of the versioned names a program built against CUDA 2.x, 12 or 13 calls; cuGetProcAddress(_v2) of
  // the base names the runtime asks for, with and without the per-thread-stream flag.
  for (const char* how : {"dlsym", "getproc", "getproc2"}) {
    for (const char* version : {"2000", "12000", "13000"}) {
      for (const char* flags : {"0", "2"}) {
        const Output o = Run({"hooked", how, version, flags});
        ASSERT_EQ(o.lines.size(), 25u) << o.err;
        for (const std::string& line : o.lines)
          EXPECT_EQ(line.substr(line.find(' ') + 1), "guard")
              << how << " " << version << " " << flags << ": " << line;
      }
    }
  }
}

TEST_F(GuardTest, CuGetProcAddressIsInterceptedByNameWhenTheDriverAnswersAnUnexportedAddress) {
  auto o =
      Run({"path", "getproc", "12000", "0", "alloc", "80", "alloc", "30", "free", "0", "alloc", "30", "info"},
          {{"FAKE_CUDA_PROC_INTERNAL", "1"}});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "free 0", "alloc 0", "info 70 100 0"})) << o.err;
}

TEST_F(GuardTest, DlsymWithRtldNextStaysRelativeToItsCaller) {
  EXPECT_EQ(Run({"layers"}, {{"LD_PRELOAD", ""}}).lines, (Lines{"layers 11"}));  // without the guard
  EXPECT_EQ(Run({"layers", "alloc", "1"}).lines, (Lines{"layers 11", "alloc 0"}));
}

TEST_F(GuardTest, DlopenAndDlsymAreIntercepted) {
  auto o = Run({"path", "dlsym", "alloc", "80", "alloc", "30", "array", "10240", "1024", "info"});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "array 2", "info 20 100 0"})) << o.err;
}

TEST_F(GuardTest, ADeadProcessesMemoryIsReturned) {
  EXPECT_EQ(Run({"alloc", "80", "die"}).lines, (Lines{"alloc 0"}));
  auto killed = Run({"alloc", "15", "kill"});
  EXPECT_TRUE(WIFSIGNALED(killed.status));
  EXPECT_EQ(Run({"alloc", "100", "info"}).lines, (Lines{"alloc 0", "info 0 100 0"}));
}

TEST_F(GuardTest, WithoutTheEnvironmentTheGuardStepsAside) {
  auto o = Run({"alloc", "500", "info"}, {{"MGPU_VISIBLE_CARDS", ""}});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "info 500 1000 0"}));
  EXPECT_EQ(o.err, "");  // a process outside mgpu hears nothing
  auto bad = Run({"alloc", "500"}, {{"MGPU_MEMORY_MIB", "lots"}});
  EXPECT_EQ(bad.lines, (Lines{"alloc 0"}));
  EXPECT_NE(bad.err.find("MGPU_MEMORY_MIB is missing or not a positive whole number"), std::string::npos)
      << bad.err;
  auto no_token = Run({"alloc", "500"}, {{"MGPU_CONTAINER_TOKEN", ""}});
  EXPECT_EQ(no_token.lines, (Lines{"alloc 0"}));
  EXPECT_FALSE(std::filesystem::exists(Path("cards/") + kCard));
}

TEST_F(GuardTest, ACorruptStateFileIsIgnoredSafely) {
  std::filesystem::create_directories(Path("cards/") + kCard);
  const std::string state = StatePath(Path("cards"), kCard);
  // Garbage, a truncated file and another version: no one uses them, so the guard starts afresh.
  for (const std::string& bytes : {std::string(5000, '\x7f'), std::string("MPG"), std::string()}) {
    std::ofstream(state, std::ios::binary) << bytes;
    auto o = Run({"alloc", "100", "alloc", "1"});
    EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2"})) << o.err;
  }
  auto record = std::make_unique<StateFile>();
  {
    std::ifstream in(state, std::ios::binary);
    in.read(reinterpret_cast<char*>(record.get()), sizeof(StateFile));
  }
  record->header.version = kStateVersion + 1;
  std::ofstream(state, std::ios::binary).write(reinterpret_cast<char*>(record.get()), sizeof(StateFile));
  EXPECT_EQ(Run({"alloc", "100", "alloc", "1"}).lines, (Lines{"alloc 0", "alloc 2"}));

  // Corrupted under a live process: the others do not trust it, and hold themselves alone to the cap (the
  // best enforcement left without the shared state), and say so once.
  auto holder = Start({"alloc", "10", "touch", Path("a"), "wait", Path("b")});
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(Path("a")); }));
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("garbage!", 8);
  }
  auto o = Run({"alloc", "500", "alloc", "100", "alloc", "1", "info"});
  EXPECT_EQ(o.lines, (Lines{"alloc 2", "alloc 0", "alloc 2", "info 0 100 0"}));
  EXPECT_NE(o.err.find("so this process holds itself alone to the container's cap and share on this card"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  Touch("b");
  EXPECT_EQ(Finish(holder).status, 0);
}

TEST_F(GuardTest, OfflineIsHeldWhileOnlineLaunchesAndReleasedAfter) {
  const Env offline = {{"MGPU_QOS_LEVEL", "offline"},         {"MGPU_CORE_PERCENT", ""},
                       {"MGPU_RECLAIMED_CORE_PERCENT", "50"}, {"MGPU_CONTAINER_TOKEN", "offline-b"},
                       {"FAKE_CUDA_TAG", "offline"},          {"FAKE_CUDA_LOG", Path("log")},
                       {"MGPU_GUARD_RELEASE_MS", "1000"}};  // longer than a loaded machine stalls
  // Alone on the card, offline work launches freely.
  EXPECT_EQ(Run({"launch", "3"}, offline).lines, (Lines{"launched 3 0"}));
  ASSERT_TRUE(Record("offline-b"));
  EXPECT_EQ(Record("offline-b")->held_back, 0u);
  EXPECT_EQ(Record("offline-b")->launches, 3u);
  std::filesystem::remove(Path("log"));

  auto online = Start(
      {"launch-until", Path("stop")},
      {{"MGPU_CONTAINER_TOKEN", "online-a"}, {"FAKE_CUDA_TAG", "online"}, {"FAKE_CUDA_LOG", Path("log")}});
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("online-a");
    return c && c->launches > 0;
  }));
  auto held = Start({"launch", "1", "graph", "1"}, offline);
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("offline-b");
    return c && c->waiting == 1;
  }));
  EXPECT_EQ(Container("offline-b")->held_back, 1u);
  Touch("stop");
  const Output online_out = Finish(online);
  const Output offline_out = Finish(held);
  EXPECT_EQ(offline_out.lines, (Lines{"launched 1 0", "launched 1 0"})) << offline_out.err;
  // Every offline launch reached the driver after the last online one.
  std::ifstream log(Path("log"));
  std::vector<std::string> order;
  for (std::string line; std::getline(log, line);) order.push_back(line.substr(0, line.rfind(' ')));
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(order[order.size() - 1], "launch offline");
  EXPECT_EQ(order[order.size() - 2], "launch offline");
  EXPECT_EQ(order[order.size() - 3], "launch online");
  EXPECT_EQ(std::count(order.begin(), order.end(), "launch offline"), 2);
  auto record = Record("offline-b");
  ASSERT_TRUE(record);
  EXPECT_GT(record->held_ns, 0u);
}

TEST_F(GuardTest, FixedShareIsHeldToItsShareAloneOnTheCard) {
  auto busy = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("container-a");
    return c && c->waiting == 1 && c->throttled >= 1;
  }));
  const uint64_t launches = Container("container-a")->launches;
  SetUtil(std::to_string(busy.pid) + " 0\n");  // the card sees the throttled container idle: budget refills
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("container-a");
    return c && c->launches > launches;
  }));
  Touch("stop");
  EXPECT_EQ(Finish(busy).status, 0);
}

TEST_F(GuardTest, NvmlIsReadOffTheLaunchingThread) {
  // A real driver's utilisation call takes milliseconds: a launch that made it would wait for it. The
  // process's own reader thread makes it, while the main thread launches and waits for its share.
  auto busy = Start({"launch-until", Path("stop")},
                    {{"MGPU_COMPUTE_POLICY", "fixed-share"}, {"FAKE_NVML_READ_LOG", Path("reads")}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  StopLaunching(busy);
  std::ifstream reads(Path("reads"));
  std::map<std::string, int> by;
  for (std::string line; std::getline(reads, line);) ++by[line];
  EXPECT_GT(by["read thread"], 0);
  EXPECT_EQ(by["read main"], 0);
  // Under native-burst-share nothing is measured: no thread, no read.
  std::filesystem::remove(Path("reads"));
  auto native = Run({"launch", "1000"}, {{"FAKE_NVML_READ_LOG", Path("reads")}});
  EXPECT_EQ(native.lines, (Lines{"launched 1000 0"}));
  EXPECT_FALSE(std::filesystem::exists(Path("reads")));
}

TEST_F(GuardTest, ABacklogOfNvmlSamplesIsSkippedNotAskedForForever) {
  auto busy = Start({"launch-until", Path("stop")},
                    {{"MGPU_COMPUTE_POLICY", "fixed-share"}, {"FAKE_NVML_BACKLOG", "1000"}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  StopLaunching(busy);
}

TEST_F(GuardTest, NvmlThatNeverReportsUtilisationIsSaidOnce) {
  SetUtil("");  // NOT_FOUND for every process, as from a driver without per-process accounting
  auto busy = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"}});
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("container-a");
    return c && c->launches > 0;
  }));
  // The guard speaks after 2 s of launches without a sample: let it launch for longer than that.
  const auto after = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  ASSERT_TRUE(Eventually([&] { return std::chrono::steady_clock::now() > after; }));
  EXPECT_EQ(Container("container-a")->throttled, 0u);  // nothing measured, nothing held
  Touch("stop");
  const Output done = Finish(busy);
  EXPECT_EQ(done.status, 0);
  const std::string text = "NVML has reported no utilisation for 2 s of launches";
  const size_t first = done.err.find(text);
  ASSERT_NE(first, std::string::npos) << done.err;
  EXPECT_EQ(done.err.find(text, first + 1), std::string::npos) << "said twice: " << done.err;
}

TEST_F(GuardTest, WhenNvmlShowsNoGuardedPidTheCardsTotalGoesToTheContainersThatLaunched) {
  // As in a container whose pid namespace hides host pids: the one sample is another pid's.
  SetUtil("999999 90\n");
  auto busy = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"}});
  ASSERT_TRUE(HeldWith(90));
  StopLaunching(busy);
}

TEST_F(GuardTest, GuaranteedShareUsesIdleComputeAndNativeIsNeverThrottled) {
  Touch("stop-now");
  for (const char* policy : {"guaranteed-burst-share", "native-burst-share"}) {
    // 50 percent measured against a 30 percent share: fixed-share would throttle; these never do, since the
    // card's other 50 percent is idle (guaranteed) or there is no throttle at all (native).
    auto c = Start({"wait", Path("go"), "launch", "400"},
                   {{"MGPU_COMPUTE_POLICY", policy}, {"MGPU_CONTAINER_TOKEN", std::string("t-") + policy}});
    SetUtil(std::to_string(c.pid) + (std::string(policy) == "native-burst-share" ? " 100\n" : " 50\n"));
    Touch("go");
    auto o = Finish(c);
    EXPECT_EQ(o.lines, (Lines{"launched 400 0"})) << policy << o.err;
    auto record = Record(std::string("t-") + policy);
    ASSERT_TRUE(record) << policy;
    EXPECT_EQ(record->throttled, 0u) << policy;
    EXPECT_EQ(record->launches, 400u) << policy;
    std::filesystem::remove(Path("go"));
  }
}

TEST_F(GuardTest, GuaranteedShareGivesWayToAContainerBelowItsShare) {
  auto burster = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "guaranteed-burst-share"},
                                                        {"MGPU_CONTAINER_TOKEN", "guaranteed"}});
  auto fixed = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"},
                                                      {"MGPU_CORE_PERCENT", "70"},
                                                      {"MGPU_CONTAINER_TOKEN", "fixed-70"}});
  // The burster has 60 of the card, the other 40 of its 70: the burster's share is all that is left for it.
  SetUtil(std::to_string(burster.pid) + " 60\n" + std::to_string(fixed.pid) + " 40\n");
  ASSERT_TRUE(Eventually([&] {
    auto s = Container("guaranteed");
    return s && s->throttled >= 1;
  }));
  EXPECT_EQ(Container("fixed-70")->throttled, 0u);
  SetUtil("");
  Touch("stop");
  EXPECT_EQ(Finish(burster).status, 0);
  EXPECT_EQ(Finish(fixed).status, 0);
}

TEST_F(GuardTest, SamplesThatAddUpToMoreThanTheCardAreScaledToIt) {
  auto a = Start({"launch-until", Path("stop")}, {{"MGPU_CONTAINER_TOKEN", "a"}});
  auto b = Start(
      {"launch-until", Path("stop")},
      {{"MGPU_CONTAINER_TOKEN", "b"}, {"MGPU_COMPUTE_POLICY", "fixed-share"}, {"MGPU_CORE_PERCENT", "60"}});
  SetUtil(std::to_string(a.pid) + " 90\n" + std::to_string(b.pid) + " 60\n");  // time-sliced: 150 in all
  ASSERT_TRUE(Eventually([&] {
    auto sa = Container("a");
    auto sb = Container("b");
    return sa && sb && sa->util_percent == 60 && sb->util_percent == 40;
  }));
  SetUtil("");
  Touch("stop");
  EXPECT_EQ(Finish(a).status, 0);
  EXPECT_EQ(Finish(b).status, 0);
}

TEST_F(GuardTest, GuaranteedShareAloneOnABusyCardIsNeverThrottled) {
  auto c = Start({"launch-until", Path("stop")},
                 {{"MGPU_COMPUTE_POLICY", "guaranteed-burst-share"}, {"MGPU_CONTAINER_TOKEN", "alone"}});
  SetUtil(std::to_string(c.pid) + " 100\n");  // it alone keeps the card busy: the card is its to use
  ASSERT_TRUE(Eventually([&] {
    auto s = Container("alone");
    return s && s->util_percent == 100 && s->launches > 200;
  }));
  EXPECT_EQ(Container("alone")->throttled, 0u);
  Touch("stop");
  EXPECT_EQ(Finish(c).status, 0);
}

TEST_F(GuardTest, EveryLaunchPathWaitsForOnlineWork) {
  // An offline container's launch, by each entry point, found directly or through CUDA 13's
  // cuGetProcAddress_v2 with the per-thread-stream flag (the _ptsz forms), is held while online work runs.
  const std::vector<std::string> kinds = {"launch",        "launch-ex",   "coop",
                                          "coop-multi",    "graph",       "graph-upload",
                                          "legacy-launch", "launch-grid", "launch-grid-async"};
  for (const Lines& path : {Lines{"path", "direct"}, Lines{"path", "getproc2", "13000", "2"}}) {
    for (const std::string& kind : kinds) {
      std::filesystem::remove(Path("stop"));
      const std::string token = "off-" + kind + "-" + path[1];
      auto online = Start({"launch-until", Path("stop")}, {{"MGPU_CONTAINER_TOKEN", "online-a"}});
      ASSERT_TRUE(Eventually([&] {
        auto c = Container("online-a");
        return c && c->launches > 0;
      }));
      Lines args = path;
      args.insert(args.end(), {kind, "1"});
      auto held = Start(args, {{"MGPU_QOS_LEVEL", "offline"},
                               {"MGPU_CONTAINER_TOKEN", token},
                               {"MGPU_GUARD_RELEASE_MS", "1000"}});  // longer than a loaded machine stalls
      // held_back counts a launch that waited; it stays counted if a stalled online process lets it go early.
      EXPECT_TRUE(Eventually([&] {
        auto c = Container(token);
        return c && c->held_back == 1;
      })) << kind
          << " " << path[1];
      Touch("stop");
      EXPECT_EQ(Finish(online).status, 0);
      EXPECT_EQ(Finish(held).lines, (Lines{"launched 1 0"})) << kind << " " << path[1];
      EXPECT_EQ(Record(token)->launches, 1u) << kind;
    }
  }
}

TEST_F(GuardTest, GraphLaunchesAreHeldToTheShare) {
  auto busy = Start({"until", "graph", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  StopLaunching(busy);
}

TEST_F(GuardTest, OfflineWorkIsHeldToItsReclaimedPercent) {
  const Env offline = {{"MGPU_QOS_LEVEL", "offline"},
                       {"MGPU_CORE_PERCENT", ""},
                       {"MGPU_RECLAIMED_CORE_PERCENT", "30"},
                       {"MGPU_CONTAINER_TOKEN", "container-a"}};
  auto busy = Start({"launch-until", Path("stop")}, offline);
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  EXPECT_EQ(Container("container-a")->held_back, 0u);  // no online work: held by its percent alone
  StopLaunching(busy);
}

TEST_F(GuardTest, NvmlShowsTheProcessItsSliceHoweverNvmlIsReached) {
  for (const char* route : {"direct", "dlsym"}) {
    auto o = Run(
        {"alloc", "30", "nvml", route, "nvml-mem", "nvml-mem2", "nvml-procs", "v1", "nvml-procs", "v2",
         "nvml-procs", "v3", "nvml-gprocs", "nvml-procs", "detail", "nvml-detail", "1", "nvml-detail", "2"},
        {{"FAKE_NVML_USED_MIB", "500"}, {"FAKE_NVML_PROCESSES", "4242:500"}});
    ASSERT_EQ(o.lines.size(), 10u) << o.err;
    EXPECT_EQ(o.lines[1], "nvml-mem 100 30 70 0") << route;
    EXPECT_EQ(o.lines[2], "nvml-mem2 100 30 70 0") << route;  // the driver's reserve is not the container's
    const std::string own = "procs 1 " + std::to_string(WaitPid(o)) + ":30 0";
    EXPECT_EQ(o.lines[3], own) << route;
    EXPECT_EQ(o.lines[4], own) << route;
    EXPECT_EQ(o.lines[5], own) << route;
    EXPECT_EQ(o.lines[6], "procs 0 0") << route;  // the host's process 4242 is not the container's
    // nvmlDeviceGetRunningProcessDetailList (nvidia-smi's process table): compute, graphics, MPS.
    EXPECT_EQ(o.lines[7], own) << route;
    EXPECT_EQ(o.lines[8], "procs 0 0") << route;
    EXPECT_EQ(o.lines[9], "procs 0 0") << route;
  }
}

TEST_F(GuardTest, NvidiaSmiInTheContainerSeesTheContainersUseWithoutJoiningIt) {
  auto holder = Start({"alloc", "60", "touch", Path("a"), "wait", Path("b")});
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(Path("a")); }));
  auto smi = Run({"nvml", "dlsym", "nvml-mem", "nvml-procs", "v3", "nvml-procs", "detail"});
  const std::string own = "procs 1 " + std::to_string(holder.pid) + ":60 0";
  EXPECT_EQ(smi.lines, (Lines{"nvml-mem 100 60 40 0", own, own})) << smi.err;
  EXPECT_EQ(Container("container-a")->processes, 1u);  // it read the state, it did not register
  // Another container's view holds only its own.
  auto other =
      Run({"nvml", "direct", "nvml-mem", "nvml-procs", "v2"}, {{"MGPU_CONTAINER_TOKEN", "container-b"}});
  EXPECT_EQ(other.lines, (Lines{"nvml-mem 100 0 100 0", "procs 0 0"}));
  Touch("b");
  EXPECT_EQ(Finish(holder).status, 0);
}

TEST_F(GuardTest, NvmlNeverShowsMoreFreeThanTheCardHasAndOutsideMgpuIsNvmlsOwn) {
  auto full = Run({"nvml", "dlsym", "nvml-mem"}, {{"FAKE_NVML_USED_MIB", "950"}});
  EXPECT_EQ(full.lines, (Lines{"nvml-mem 100 0 50 0"}));
  auto outside =
      Run({"nvml", "dlsym", "nvml-mem", "nvml-procs", "v3", "nvml-procs", "detail", "nvml-util"},
          {{"MGPU_VISIBLE_CARDS", ""}, {"FAKE_NVML_PROCESSES", "4242:500"}, {"FAKE_NVML_GPU_UTIL", "55"}});
  EXPECT_EQ(outside.lines,
            (Lines{"nvml-mem 1000 0 1000 0", "procs 1 4242:500 0", "procs 1 4242:500 0", "util 55 0"}));
  auto other_card =
      Run({"nvml", "direct", "nvml-mem"},
          {{"FAKE_CUDA_UUIDS", "GPU-eeeeeeee-0000-1111-2222-333344445555," + std::string(kCard)}});
  EXPECT_EQ(other_card.lines, (Lines{"nvml-mem 1000 0 1000 0"}));  // device 0 is not the container's card
}

TEST_F(GuardTest, NvmlUtilizationIsTheContainersMeasuredUse) {
  SetUtil("999999 70\n");  // the card's use, with host pids the container cannot see
  auto c = Start(
      {"launch", "40", "wait", Path("measured"), "nvml", "direct", "nvml-util"},
      {{"MGPU_COMPUTE_POLICY", "fixed-share"}, {"MGPU_CORE_PERCENT", "100"}, {"FAKE_NVML_GPU_UTIL", "55"}});
  ASSERT_TRUE(Eventually([&] {  // the process's reader measured it
    auto r = Container("container-a");
    return r && r->util_percent == 70;
  }));
  Touch("measured");
  const Output o = Finish(c);
  EXPECT_EQ(o.lines, (Lines{"launched 40 0", "util 70 0"})) << o.err;
}

TEST_F(GuardTest, WithoutAStateDirectoryAProcessHoldsItselfToTheCap) {
  auto o = Run({"alloc", "100", "alloc", "1", "info"}, {{"MGPU_GUARD_STATE_DIR", "/proc/no-such-dir"}});
  EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "info 0 100 0"}));
  EXPECT_NE(o.err.find("the state file cannot be opened, so this process holds itself alone"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

TEST_F(GuardTest, AProcessKilledHoldingTheCardLockBlocksNoOne) {
  ASSERT_EQ(Run({"alloc", "1"}).status, 0);  // the state exists
  auto locker = Start({"lock-card", StatePath(Path("cards"), kCard), Path("locked")}, {{"LD_PRELOAD", ""}});
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(Path("locked")); }));
  kill(locker.pid, SIGKILL);
  Finish(locker);
  EXPECT_EQ(Run({"alloc", "100", "alloc", "1"}).lines, (Lines{"alloc 0", "alloc 2"}));
}

TEST_F(GuardTest, AProcessKilledWhileItsLaunchWaitedLeavesNoWaitBehind) {
  auto online = Start({"launch-until", Path("stop")}, {{"MGPU_CONTAINER_TOKEN", "online-a"}});
  ASSERT_TRUE(Eventually([&] {
    auto c = Container("online-a");
    return c && c->launches > 0;
  }));
  const Env offline = {{"MGPU_QOS_LEVEL", "offline"},
                       {"MGPU_CONTAINER_TOKEN", "offline-b"},
                       {"MGPU_GUARD_RELEASE_MS", "1000"}};  // longer than a loaded machine stalls
  auto held = Start({"launch", "1"}, offline);
  ASSERT_TRUE(Eventually([&] {
    auto r = Record("offline-b");
    return r && r->waiting == 1;
  }));
  kill(held.pid, SIGKILL);
  Finish(held);
  EXPECT_EQ(Run({"alloc", "1"}, offline).lines, (Lines{"alloc 0"}));  // registering reclaims the dead
  EXPECT_EQ(Record("offline-b")->waiting, 0u);
  Touch("stop");
  EXPECT_EQ(Finish(online).status, 0);
}

TEST_F(GuardTest, ALostCardLetsWaitingLaunchesGoAndSaysSo) {
  auto busy = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"},
                                                     {"FAKE_NVML_LOST", Path("lost")},
                                                     {"FAKE_CUDA_LOST", Path("lost")}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  Touch("lost");  // the card falls off the bus: NVML answers GPU_IS_LOST, the driver fails every call
  ASSERT_TRUE(Eventually([&] {
    auto r = Record("container-a");
    return r && r->waiting == 0;
  }));
  Touch("stop");
  const Output o = Finish(busy);
  EXPECT_EQ(o.status, 0);
  ASSERT_EQ(o.lines.size(), 1u);
  EXPECT_NE(o.lines[0].find(" 46"), std::string::npos) << o.lines[0];  // the driver's own error reaches it
  EXPECT_NE(o.err.find("the card is lost), so the compute share is no longer enforced on it"),
            std::string::npos)
      << o.err;
}

TEST_F(GuardTest, ClockStampsFromTheFutureHoldNothing) {
  ASSERT_EQ(Run({"alloc", "1"}).status, 0);  // the state exists
  const auto stamp = [&](size_t offset, uint64_t value) {
    std::fstream f(StatePath(Path("cards"), kCard), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  const auto now_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
  };
  const uint64_t hour_ns = 3600ULL * 1'000'000'000ULL;
  // An online launch stamped an hour ahead: an offline launch does not wait an hour.
  stamp(offsetof(StateFile, header.online_last_launch_ns), now_ns() + hour_ns);
  auto offline = Run({"launch", "1"}, {{"MGPU_QOS_LEVEL", "offline"}, {"MGPU_CONTAINER_TOKEN", "offline-b"}});
  EXPECT_EQ(offline.lines, (Lines{"launched 1 0"}));
  EXPECT_EQ(Record("offline-b")->held_back, 0u);
  EXPECT_NE(offline.err.find("so offline launches do not wait for it"), std::string::npos) << offline.err;
  // A refill stamped an hour ahead and NVML's last sample an hour ahead (the realtime clock set back): the
  // budget still refills and is still charged.
  stamp(offsetof(StateFile, header.last_refill_ns), now_ns() + hour_ns);
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  stamp(offsetof(StateFile, header.nvml_last_seen_us),
        static_cast<uint64_t>(real.tv_sec + 3600) * 1'000'000ULL);
  auto busy = Start({"launch-until", Path("stop")}, {{"MGPU_COMPUTE_POLICY", "fixed-share"}});
  SetUtil(std::to_string(busy.pid) + " 90\n");
  ASSERT_TRUE(HeldWith(90));
  SetUtil("");
  Touch("stop");
  const Output o = Finish(busy);
  EXPECT_EQ(o.status, 0);
  EXPECT_NE(o.err.find("the guard reads samples from now on"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("so the guard refills from now on"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace mgpu::guard
