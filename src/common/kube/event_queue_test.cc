#include "common/kube/event_queue.h"

#include <gtest/gtest.h>

#include "testing/fake_apiserver.h"

namespace mgpu::kube {
namespace {

using mgpu::testing::Fault;
using mgpu::testing::FakeApiServer;

std::unique_ptr<Client> ClientOf(const FakeApiServer& server) {
  ClusterConfig config;
  config.server = server.url();
  auto client = Client::Create(std::move(config));
  EXPECT_TRUE(client.ok()) << (client.ok() ? "" : client.message());
  return client.ok() ? std::move(client.value()) : nullptr;
}

TEST(EventQueue, CreatesEveryPostedEvent) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = ClientOf(server);
  EventQueue events(*client, "mgpu-test");
  events.Post(PodReference("ns", "p", "u1"), "Normal", "First", "one");
  events.Post(PodReference("ns", "p", "u1"), "Warning", "Second", "two");
  events.Flush();
  const auto created = server.List("events", "ns");
  ASSERT_EQ(created.size(), 2u);
  std::vector<std::string> reasons;
  for (const Json& e : created) reasons.push_back(e.value("reason", ""));
  std::sort(reasons.begin(), reasons.end());
  EXPECT_EQ(reasons, (std::vector<std::string>{"First", "Second"}));
  EXPECT_EQ(created[0]["involvedObject"]["uid"], "u1");
  EXPECT_EQ(created[0]["involvedObject"]["kind"], "Pod");
}

TEST(EventQueue, FullQueueDropsAndFailuresAreNotFatal) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = ClientOf(server);
  server.InjectFault(Fault{.action = Fault::Action::kStatus, .method = "POST", .status = 500, .times = -1});
  EventQueue events(*client, "mgpu-test", 2);
  for (int i = 0; i < 50; ++i) events.Post(PodReference("ns", "p", "u"), "Normal", "R", std::to_string(i));
  events.Flush();
  EXPECT_GT(events.dropped(), 0u);
  EXPECT_TRUE(server.List("events").empty());
  events.Stop();
  events.Post(PodReference("ns", "p", "u"), "Normal", "Late", "after stop");  // dropped, no crash
  events.Stop();
}

}  // namespace
}  // namespace mgpu::kube
