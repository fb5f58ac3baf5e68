// The slice publisher against the fake API server (tests/support): what it publishes, and that it publishes
// again, at a higher pool generation, after a deletion, a health change and a restart. The real
// kube-apiserver accepting these slices and the real kubelet deleting them are tests/dra/'s part.
#include "dra/publisher.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/codec.h"
#include "common/dra.h"
#include "dra/plugin.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu::dra {
namespace {

using mgpu::testing::WaitUntil;
using nlohmann::json;

class PublisherTest : public ::testing::Test {
 protected:
  PublisherTest()
      : state_({Card{0, "GPU-a", "NVIDIA A10", 24576, true}, Card{1, "GPU-b", "NVIDIA A10", 24576, true}}) {
    config_.dra.cards = "any";  // the opt-in six-device layout: a counters slice and a devices slice
    EXPECT_TRUE(api_.Start().ok());
    json node = {
        {"metadata", {{"name", "node-a"}, {"annotations", {{config_.Names().gpu_inventory, "{}"}}}}}};
    EXPECT_TRUE(api_.Create("nodes", node).ok());
    client_ = kube::Client::Create({.server = api_.url()}).value();
    for (const Card& c : state_.Cards()) cards_.push_back(NodeCard{c, 24576, "", {}});
  }

  std::unique_ptr<SlicePublisher> Start() {
    auto p = std::make_unique<SlicePublisher>(config_, "node-a", cards_, *client_, state_, "test");
    p->Start();
    return p;
  }

  std::vector<json> Slices() { return api_.List("resourceslices"); }
  int64_t GenerationStored() {
    auto all = Slices();
    return all.empty() ? 0 : all[0]["spec"]["pool"]["generation"].get<int64_t>();
  }
  bool AllAt(int64_t generation, size_t count = 2) {
    auto all = Slices();
    if (all.size() != count) return false;
    for (const json& s : all) {
      if (s["spec"]["pool"]["generation"] != generation) return false;
    }
    return true;
  }

  testing::FakeApiServer api_;
  Config config_;
  node::DeviceState state_;
  std::vector<NodeCard> cards_;
  std::unique_ptr<kube::Client> client_;
};

TEST_F(PublisherTest, PublishesThePoolAndLabelsTheNode) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return p->UpToDate() && AllAt(1); }));
  auto devices = api_.Get("resourceslices", "", "node-a-mgpu.io-devices-0");
  ASSERT_TRUE(devices.has_value());
  EXPECT_EQ((*devices)["spec"]["devices"].size(), 12u);
  EXPECT_TRUE(api_.Get("resourceslices", "", "node-a-mgpu.io-counters-0").has_value());
  ASSERT_TRUE(WaitUntil([&] {
    auto node = api_.Get("nodes", "", "node-a");
    return node &&
           (*node)["metadata"].value("labels", json::object()).value(config_.Names().label_count, "") == "2";
  }));
  auto node = *api_.Get("nodes", "", "node-a");
  // A DRA node carries no device-plugin inventory: the extender places no device-plugin pod there.
  EXPECT_FALSE(node["metadata"].value("annotations", json::object()).contains(config_.Names().gpu_inventory));
  // Its cards are D/gpu-dra-inventory: the extender scores DRA pods with them.
  const std::string dra_inventory =
      node["metadata"].value("annotations", json::object()).value(config_.Names().gpu_dra_inventory, "");
  Result<NodeInventory> inventory = DecodeInventory(dra_inventory);
  ASSERT_TRUE(inventory.ok()) << dra_inventory;
  EXPECT_FALSE(inventory->cards.empty());
  EXPECT_EQ(p->publications(), 1u);
}

TEST_F(PublisherTest, ASliceTheKubeletDeletesComesBackAtAHigherGeneration) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(1); }));
  ASSERT_TRUE(api_.Delete("resourceslices", "", "node-a-mgpu.io-devices-0").ok());
  ASSERT_TRUE(WaitUntil([&] { return AllAt(2); }));
  // Someone else's edit of a slice is undone too.
  auto counters = *api_.Get("resourceslices", "", "node-a-mgpu.io-counters-0");
  counters["spec"]["sharedCounters"][0]["counters"]["sharing"]["value"] = "2";
  auto updated = api_.Update("resourceslices", counters);
  ASSERT_TRUE(updated.ok()) << updated.message();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(3); }));
  EXPECT_EQ(
      (*api_.Get("resourceslices", "",
                 "node-a-mgpu.io-counters-0"))["spec"]["sharedCounters"][0]["counters"]["sharing"]["value"],
      "1");
}

TEST_F(PublisherTest, AHealthChangeTaintsTheCardsDevicesInANewGeneration) {
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return AllAt(1); }));
  state_.SetHealthy("GPU-b", false);
  ASSERT_TRUE(WaitUntil([&] { return AllAt(2); }));
  const json devices = (*api_.Get("resourceslices", "", "node-a-mgpu.io-devices-0"))["spec"]["devices"];
  for (const json& d : devices)
    EXPECT_EQ(d.contains("taints"), d["name"].get<std::string>().starts_with("gpu-1-")) << d["name"];
}

TEST_F(PublisherTest, AStartPublishesAboveEveryGenerationAndDropsStaleSlices) {
  json stale = {{"metadata", {{"name", "node-a-mgpu.io-devices-9"}}},
                {"spec",
                 {{"driver", "mgpu.io"},
                  {"nodeName", "node-a"},
                  {"pool", {{"name", "node-a"}, {"generation", 41}, {"resourceSliceCount", 1}}},
                  {"devices", json::array()}}}};
  json other_node = stale;
  other_node["metadata"]["name"] = "node-b-mgpu.io-devices-0";
  other_node["spec"]["nodeName"] = "node-b";
  ASSERT_TRUE(api_.Create("resourceslices", stale).ok());
  ASSERT_TRUE(api_.Create("resourceslices", other_node).ok());
  auto p = Start();
  ASSERT_TRUE(WaitUntil([&] { return p->UpToDate() && p->generation() > 41; }));
  EXPECT_FALSE(api_.Get("resourceslices", "", "node-a-mgpu.io-devices-9").has_value());
  EXPECT_TRUE(api_.Get("resourceslices", "", "node-b-mgpu.io-devices-0").has_value());  // not ours
  EXPECT_EQ(Slices().size(), 3u);
}

// A restart, or the new instance of a rolling update starting beside the old one, finds the pool saying what
// the cards say: it adopts the slices as stored (no write: same generation, same resourceVersions), and both
// instances keep them so while they run together.
TEST_F(PublisherTest, ARestartOrASecondInstanceAdoptsTheSlicesAsStored) {
  auto old_instance = Start();
  ASSERT_TRUE(WaitUntil([&] { return old_instance->UpToDate() && AllAt(old_instance->generation()); }));
  std::map<std::string, std::string> versions;
  const auto stored_versions = [&] {
    std::map<std::string, std::string> out;
    for (const json& s : Slices()) out[MetadataString(s, "name")] = MetadataString(s, "resourceVersion");
    return out;
  };
  // Its informer may see its own first write before the write's answer: let it settle on one version.
  ASSERT_TRUE(WaitUntil([&] {
    const auto before = stored_versions();
    return old_instance->UpToDate() && old_instance->generation() == GenerationStored() &&
           before == (versions = stored_versions());
  }));
  auto new_instance = Start();
  ASSERT_TRUE(WaitUntil([&] { return new_instance->UpToDate(); }));
  EXPECT_EQ(new_instance->publications(), 0u);
  EXPECT_EQ(new_instance->generation(), old_instance->generation());
  EXPECT_EQ(stored_versions(), versions) << "a slice was written again";
  old_instance->Stop();  // SIGTERM: the slices stay
  EXPECT_EQ(stored_versions(), versions);
  new_instance->Stop();
  auto restarted = Start();
  ASSERT_TRUE(WaitUntil([&] { return restarted->UpToDate(); }));
  EXPECT_EQ(restarted->publications(), 0u);
  EXPECT_EQ(stored_versions(), versions);
}

// A rolling update whose new instance publishes the pool differently (another dra.cards): the old instance,
// seeing the pool written by a newer instance that answers on its registration socket, leaves it (no turn
// of rewrites); once the newer one is gone (its publisher stopped, its socket closed), the old one publishes
// again.
TEST_F(PublisherTest, AnOlderInstanceLeavesThePoolToALiveNewerOne) {
  testing::TempDir dir;
  Config old_config = config_;
  old_config.dra.kubelet_root_dir = dir.path();
  Config new_config = old_config;
  new_config.dra.cards = "fixed";
  const std::string old_id = "0b0a0000-0000-4000-8000-000000000001";
  const std::string new_id = "0b0a0000-0000-4000-8000-000000000002";
  const std::string socket_path = RegistrationSocketPath(new_config, new_id);
  std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path());
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 8), 0);

  SlicePublisher old_instance(old_config, "node-a", cards_, *client_, state_, "test", old_id);
  old_instance.Start();
  ASSERT_TRUE(WaitUntil([&] { return old_instance.UpToDate(); }));
  const size_t old_slices = Slices().size();
  auto new_instance =
      std::make_unique<SlicePublisher>(new_config, "node-a", cards_, *client_, state_, "test", new_id);
  new_instance->Start();
  ASSERT_TRUE(WaitUntil([&] { return new_instance->UpToDate() && !old_instance.UpToDate(); }))
      << "the old instance did not leave the pool to the newer one";
  const uint64_t old_writes = old_instance.publications();
  const int64_t generation = GenerationStored();
  state_.SetHealthy("GPU-b", false);  // both see it; only the newer one writes
  // A stored generation past the one read, and the newer instance up to date with the unhealthy card (a count
  // of its writes could still see one it began before the change).
  ASSERT_TRUE(WaitUntil([&] { return GenerationStored() > generation && new_instance->UpToDate(); }))
      << "the newer instance did not publish the unhealthy card";
  EXPECT_EQ(old_instance.publications(), old_writes);

  new_instance->Stop();
  close(listener);
  std::filesystem::remove(socket_path);
  ASSERT_TRUE(WaitUntil([&] { return old_instance.UpToDate() && old_instance.publications() > old_writes; }))
      << "the old instance did not take the pool back";
  EXPECT_EQ(Slices().size(), old_slices);
}

}  // namespace
}  // namespace mgpu::dra
