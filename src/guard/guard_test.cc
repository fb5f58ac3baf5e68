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
    return Finish(Start(args, overrides));
  }

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
        Lines{"array3d", "1024", "1024", "25"}, Lines{"pitch", "40960", "2560"}}) {
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
  for (const char* path : {"getproc", "getproc2"}) {
    auto o = Run({"path", path, "alloc", "80", "alloc", "30", "create", "30", "info"});
    EXPECT_EQ(o.lines, (Lines{"alloc 0", "alloc 2", "create 2", "info 20 100 0"})) << path << o.err;
  }
}

TEST_F(GuardTest, CuGetProcAddressIsInterceptedByNameWhenTheDriverAnswersAnUnexportedAddress) {
  auto o = Run({"path", "getproc", "alloc", "80", "alloc", "30", "free", "0", "alloc", "30", "info"},
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

  // Corrupted under a live process: the others step aside (unguarded) rather than trust it, and say so.
  auto holder = Start({"alloc", "10", "touch", Path("a"), "wait", Path("b")});
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(Path("a")); }));
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("garbage!", 8);
  }
  auto o = Run({"alloc", "500"});
  EXPECT_EQ(o.lines, (Lines{"alloc 0"}));
  EXPECT_NE(o.err.find("the guard steps aside on this card"), std::string::npos) << o.err;
  Touch("b");
  EXPECT_EQ(Finish(holder).status, 0);
}

TEST_F(GuardTest, OfflineIsHeldWhileOnlineLaunchesAndReleasedAfter) {
  const Env offline = {{"MGPU_QOS_LEVEL", "offline"},         {"MGPU_CORE_PERCENT", ""},
                       {"MGPU_RECLAIMED_CORE_PERCENT", "50"}, {"MGPU_CONTAINER_TOKEN", "offline-b"},
                       {"FAKE_CUDA_TAG", "offline"},          {"FAKE_CUDA_LOG", Path("log")},
                       {"MGPU_GUARD_RELEASE_MS", "500"}};
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
  auto burster = Start({"launch-until", Path("stop")},
                       {{"MGPU_COMPUTE_POLICY", "guaranteed-burst-share"}, {"MGPU_CONTAINER_TOKEN", "guaranteed"}});
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
  auto b = Start({"launch-until", Path("stop")}, {{"MGPU_CONTAINER_TOKEN", "b"}, {"MGPU_COMPUTE_POLICY", "fixed-share"},
                                                  {"MGPU_CORE_PERCENT", "60"}});
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

}  // namespace
}  // namespace mgpu::guard
