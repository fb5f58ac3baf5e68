#include "common/daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "common/clock.h"
#include "common/metrics_text.h"

namespace mgpu {
namespace {

bool Parse(std::vector<std::string> args, std::map<std::string, std::string>& out) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data(), {"config", "listen"}, {"version"}, out);
}

TEST(Daemon, ParsesKnownFlagsAndRejectsTheRest) {
  std::map<std::string, std::string> f;
  EXPECT_TRUE(Parse({"d", "--config", "/etc/c.yaml", "--version"}, f));
  EXPECT_EQ(f["config"], "/etc/c.yaml");
  EXPECT_EQ(f["version"], "1");
  EXPECT_EQ(f.count("listen"), 0u);
  std::map<std::string, std::string> g;
  EXPECT_FALSE(Parse({"d", "--config"}, g));        // missing value
  EXPECT_FALSE(Parse({"d", "--bogus"}, g));         // unknown flag
  EXPECT_FALSE(Parse({"d", "config", "x"}, g));     // not a flag
  EXPECT_FALSE(Parse({"d", "--version", "x"}, g));  // a switch takes no value
}

TEST(Daemon, TerminationSignalsReturnTheSignalRaised) {
  TerminationSignals signals;
  ASSERT_EQ(raise(SIGTERM), 0);  // blocked: stays pending until Wait takes it
  EXPECT_EQ(signals.Wait(), SIGTERM);
}

// A node daemon's lock: a second holder, even in this process, is refused with the sentence given; once
// released it can be taken again.
TEST(Daemon, FileLockHasOneHolderAtATime) {
  char dir[] = "/tmp/mgpu-lock-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/sub/node.lock";  // the folder is made
  auto first = FileLock::Take(path, "another daemon serves this node");
  ASSERT_TRUE(first.ok()) << first.message();
  auto second = FileLock::Take(path, "another daemon serves this node");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.message(), path + " is locked: another daemon serves this node");
  first->Release();
  EXPECT_TRUE(FileLock::Take(path, "x").ok());
  std::remove(path.c_str());
  rmdir((std::string(dir) + "/sub").c_str());
  rmdir(dir);
}

// DRA instances of a rolling update share the node's lock; a daemon that wants it alone is refused while
// they hold it, and they are refused while it does.
TEST(Daemon, FileLockSharedHoldersKeepOutAnExclusiveOne) {
  char dir[] = "/tmp/mgpu-lock-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/node.lock";
  auto old_instance = FileLock::Take(path, "x", FileLock::Mode::kShared);
  auto new_instance = FileLock::Take(path, "x", FileLock::Mode::kShared);
  ASSERT_TRUE(old_instance.ok() && new_instance.ok());
  EXPECT_FALSE(FileLock::Take(path, "DRA instances serve this node").ok());
  old_instance->Release();
  EXPECT_FALSE(FileLock::Take(path, "x").ok()) << "one shared holder is left";
  new_instance->Release();
  auto alone = FileLock::Take(path, "x");
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE(FileLock::Take(path, "x", FileLock::Mode::kShared).ok());
  alone->Release();
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsText, PodLabelsAreOneSetForBothDaemons) {
  EXPECT_EQ(PodLabels("node-a", "team-a/infer-0"), R"(node="node-a",namespace="team-a",pod="infer-0")");
  EXPECT_EQ(PodLabels("n", "ns/a\"b"), R"(node="n",namespace="ns",pod="a\"b")");
}

TEST(Clock, Rfc3339ToTheSecondOrTheMicrosecond) {
  const int64_t t = 1'735'815'838'123'456'789;  // 2025-01-02T11:03:58.123456789Z
  EXPECT_EQ(Rfc3339(t), "2025-01-02T11:03:58Z");
  EXPECT_EQ(Rfc3339(t, /*micros=*/true), "2025-01-02T11:03:58.123456Z");
  EXPECT_EQ(Rfc3339(0, true), "1970-01-01T00:00:00.000000Z");
  EXPECT_GT(UnixNowNs(), t);
}

}  // namespace
}  // namespace mgpu
