#include "node/isolation_setup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "guard/state.h"

namespace mgpu::node {
namespace {

namespace fs = std::filesystem;

class IsolationSetup : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/mgpu-isolation-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    iso_.backend = IsolationBackend::kMgpu;
    iso_.guard_library_path = dir_ + "/host/lib/libmgpu-guard.so";
    iso_.guard_state_directory = dir_ + "/host/cards";
    iso_.guard_library_source = dir_ + "/image/libmgpu-guard.so";
    fs::create_directories(dir_ + "/image");
    Write(iso_.guard_library_source, "guard v1");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The guard state of card `uuid`, as the guard reads it; nullopt when it is not a valid state.
  std::optional<guard::CardSnapshot> StateOf(const std::string& uuid) const {
    guard::CardSnapshot state;
    std::string error;
    if (!guard::ReadCardState(iso_.guard_state_directory, uuid, state, error)) return std::nullopt;
    return state;
  }

  std::string dir_;
  IsolationConfig iso_;
  const std::vector<Card> cards_ = {{0, "GPU-a", "A10", 24576, true}, {1, "GPU-b", "A10", 24576, true}};
};

TEST_F(IsolationSetup, MgpuInstallsTheGuardItsPreloadAndEachCardsState) {
  ASSERT_TRUE(PrepareIsolation(iso_, cards_).ok());
  EXPECT_EQ(Read(iso_.guard_library_path), "guard v1");
  EXPECT_EQ(Read(dir_ + "/host/lib/ld.so.preload"), iso_.guard_library_path + "\n");
  for (const Card& c : cards_) {
    const std::string dir = iso_.guard_state_directory + "/" + c.uuid;
    struct stat st {};
    ASSERT_EQ(stat(dir.c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_mode & 07777, 01777u) << dir;  // every container user writes; none removes the file
    ASSERT_EQ(stat((dir + "/state").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666u);
  }
  const auto state = StateOf("GPU-a");
  ASSERT_TRUE(state.has_value());
  EXPECT_TRUE(StateOf("GPU-b").has_value());
  EXPECT_TRUE(state->containers.empty());

  // A new image's library replaces the old one; a second start changes nothing else.
  Write(iso_.guard_library_source, "guard v2");
  ASSERT_TRUE(PrepareIsolation(iso_, cards_).ok());
  EXPECT_EQ(Read(iso_.guard_library_path), "guard v2");
}

TEST_F(IsolationSetup, ACorruptStateNoOneUsesIsStartedAfresh) {
  fs::create_directories(iso_.guard_state_directory + "/GPU-a");
  Write(guard::StatePath(iso_.guard_state_directory, "GPU-a"), "not a state");
  EXPECT_FALSE(StateOf("GPU-a").has_value());
  ASSERT_TRUE(PrepareIsolation(iso_, cards_).ok());
  EXPECT_TRUE(StateOf("GPU-a").has_value());
}

TEST_F(IsolationSetup, AMissingLibraryStopsThePluginWithOneSentence) {
  iso_.guard_library_source = "";
  const Status s = PrepareIsolation(iso_, cards_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "the guard library " + iso_.guard_library_path +
                " (isolation.guardLibraryPath) does not exist: install libmgpu-guard.so there or set "
                "isolation.guardLibrarySource to a copy of it");
}

TEST_F(IsolationSetup, HamiCoreGetsItsPreloadAndNoneNothing) {
  IsolationConfig hami;
  hami.backend = IsolationBackend::kHamiCore;
  hami.hami_library_path = dir_ + "/vgpu/libvgpu.so";
  fs::create_directories(dir_ + "/vgpu");
  ASSERT_TRUE(PrepareIsolation(hami, cards_).ok());
  EXPECT_EQ(Read(dir_ + "/vgpu/ld.so.preload"), hami.hami_library_path + "\n");
  IsolationConfig none;
  none.backend = IsolationBackend::kNone;
  none.guard_state_directory = dir_ + "/never";
  EXPECT_TRUE(PrepareIsolation(none, cards_).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/never"));
}

}  // namespace
}  // namespace mgpu::node
