#include "dra/checkpoint.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "common/file.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

PreparedClaim Claim(const std::string& uid) {
  return PreparedClaim{uid,
                       "default",
                       "claim-" + uid,
                       {PreparedDevice{{"gpu"}, "node-a", "gpu-0-fixed", "share-1", {"mgpu.io/claim=" + uid}},
                        PreparedDevice{{"gpu"}, "node-a", "gpu-1-fixed", "", {}}},
                       "/var/run/cdi/mgpu.io-claim-" + uid + ".json"};
}

TEST(Checkpoint, EncodeDecodeRoundTrips) {
  const std::map<std::string, PreparedClaim> claims = {{"a", Claim("a")}, {"b", Claim("b")}};
  auto back = DecodeCheckpoint(EncodeCheckpoint(claims));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(*back, claims);
  EXPECT_TRUE(DecodeCheckpoint(EncodeCheckpoint({}))->empty());
}

TEST(Checkpoint, ATornOrForeignFileIsAnErrorNotAnEmptyState) {
  std::string text = EncodeCheckpoint({{"a", Claim("a")}});
  std::string edited = text;
  edited.replace(edited.find("gpu-0-fixed"), 11, "gpu-7-fixed");
  EXPECT_NE(DecodeCheckpoint(edited).message().find("checksum"), std::string::npos);
  EXPECT_NE(DecodeCheckpoint(text.substr(0, text.size() / 2)).message().find("not JSON"), std::string::npos);
  EXPECT_NE(DecodeCheckpoint(R"({"version": 2, "claims": []})").message().find("version"), std::string::npos);
  EXPECT_FALSE(DecodeCheckpoint("[]").ok());
}

TEST(PreparedClaims, SurvivesReopeningAndForgetsWhatWasRemoved) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/state/checkpoint.json";
  {
    auto claims = PreparedClaims::Open(path);
    ASSERT_TRUE(claims.ok()) << claims.message();
    EXPECT_FALSE((*claims)->Find("a").has_value());
    ASSERT_TRUE((*claims)->Add(Claim("a")).ok());
    ASSERT_TRUE((*claims)->Add(Claim("b")).ok());
    ASSERT_TRUE((*claims)->Remove("b").ok());
    ASSERT_TRUE((*claims)->Remove("never").ok());
  }
  auto reopened = PreparedClaims::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.message();
  EXPECT_EQ((*reopened)->Find("a"), Claim("a"));
  EXPECT_FALSE((*reopened)->Find("b").has_value());
  EXPECT_EQ((*reopened)->All().size(), 1u);
}

TEST(PreparedClaims, ACorruptCheckpointStopsTheOpenWithASentence) {
  testing::TempDir dir;
  const std::string path =
      dir.Write("checkpoint.json", "{\"version\": 1, \"claims\": [], \"checksum\": \"0\"}");
  auto claims = PreparedClaims::Open(path);
  ASSERT_FALSE(claims.ok());
  EXPECT_NE(claims.message().find("the checkpoint " + path + " cannot be used"), std::string::npos);
}

TEST(PreparedClaims, AFailedWriteChangesNothing) {
  testing::TempDir dir;
  auto claims = PreparedClaims::Open(dir.path() + "/gone/checkpoint.json");
  ASSERT_TRUE(claims.ok());
  std::filesystem::remove_all(dir.path() + "/gone");  // the folder disappears under it, a file in its place
  dir.Write("gone", "");
  Status s = (*claims)->Add(Claim("a"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gone/checkpoint.json"), std::string::npos) << s.message();
  EXPECT_FALSE((*claims)->Find("a").has_value());
}

// The two instances of a rolling update on one checkpoint: each sees what the other recorded, and either may
// forget a claim the other prepared (the kubelet picks the instance of each call).
TEST(PreparedClaims, TwoInstancesShareOneCheckpoint) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/checkpoint.json";
  auto old_instance = PreparedClaims::Open(path);
  auto new_instance = PreparedClaims::Open(path);
  ASSERT_TRUE(old_instance.ok() && new_instance.ok());
  ASSERT_TRUE((*old_instance)->Add(Claim("a")).ok());
  ASSERT_TRUE((*new_instance)->Add(Claim("b")).ok());
  EXPECT_EQ((*new_instance)->Find("a"), Claim("a"));
  EXPECT_EQ((*old_instance)->All().size(), 2u);
  ASSERT_TRUE((*new_instance)->Remove("a").ok());
  EXPECT_FALSE((*old_instance)->Find("a").has_value());
  auto reopened = PreparedClaims::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->All(), std::vector<PreparedClaim>{Claim("b")});
}

// Both instances writing at once, many times: every change of each is in the file at the end (each
// read-modify-write holds the lock on the file, so neither writes over a state without the other's claim).
// flock treats the two PreparedClaims' own opens of the lock file as two processes would be treated.
TEST(PreparedClaims, ConcurrentWritersOfTwoInstancesLoseNoClaim) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/checkpoint.json";
  auto a = PreparedClaims::Open(path);
  auto b = PreparedClaims::Open(path);
  ASSERT_TRUE(a.ok() && b.ok());
  constexpr int kEach = 100;
  auto writer = [](PreparedClaims& claims, const std::string& prefix) {
    for (int i = 0; i < kEach; ++i) {
      ASSERT_TRUE(claims.Add(Claim(prefix + std::to_string(i))).ok());
      if (i % 2) {
        ASSERT_TRUE(claims.Remove(prefix + std::to_string(i - 1)).ok());
      }
    }
  };
  std::thread ta(writer, std::ref(**a), "a"), tb(writer, std::ref(**b), "b");
  ta.join();
  tb.join();
  auto reopened = PreparedClaims::Open(path);
  ASSERT_TRUE(reopened.ok());
  std::set<std::string> uids;
  for (const PreparedClaim& c : (*reopened)->All()) uids.insert(c.uid);
  std::set<std::string> want;
  for (const std::string prefix : {"a", "b"}) {
    for (int i = 1; i < kEach; i += 2) want.insert(prefix + std::to_string(i));
  }
  EXPECT_EQ(uids, want);
}

// A change held by one instance (a CDI spec written and its claim recorded) is not interleaved with the
// other's: the other's change waits, then starts from the held one's result.
TEST(PreparedClaims, AHeldCheckpointMakesTheOtherInstanceWait) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/checkpoint.json";
  auto a = PreparedClaims::Open(path);
  auto b = PreparedClaims::Open(path);
  ASSERT_TRUE(a.ok() && b.ok());
  std::atomic<bool> b_done{false};
  std::thread other;
  {
    auto held = (*a)->Hold();
    ASSERT_TRUE(held.ok()) << held.message();
    other = std::thread([&] {
      EXPECT_TRUE((*b)->Add(Claim("b")).ok());
      b_done = true;
    });
    ASSERT_TRUE(held->Add(Claim("a")).ok());
    EXPECT_FALSE(b_done) << "the other instance wrote while the checkpoint was held";
  }
  other.join();
  EXPECT_EQ((*a)->All().size(), 2u);
}

}  // namespace
}  // namespace mgpu::dra
