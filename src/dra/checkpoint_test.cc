#include "dra/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

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
  std::filesystem::remove_all(dir.path() + "/gone");  // the folder disappears under it
  Status s = (*claims)->Add(Claim("a"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot write"), std::string::npos);
  EXPECT_FALSE((*claims)->Find("a").has_value());
}

}  // namespace
}  // namespace mgpu::dra
