#include "common/kube/event_queue.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/fake_apiserver.h"

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
  EventQueue events(*client, "mgpu-test", EventLimits{.per_second = 0, .burst = 0, .capacity = 2});
  int dropped = 0;
  for (int i = 0; i < 50; ++i)
    dropped +=
        events.Post(PodReference("ns", "p", "u"), "Normal", "R", std::to_string(i)) == Posted::kDropped;
  events.Flush();
  EXPECT_GT(dropped, 0);
  const EventCounts counts = events.Counts();
  EXPECT_EQ(counts.dropped, static_cast<uint64_t>(dropped));
  EXPECT_EQ(counts.failed + counts.dropped, 50u) << "every event is accounted for";
  EXPECT_EQ(counts.created, 0u);
  EXPECT_TRUE(server.List("events").empty());
  events.Stop();
  // After Stop: dropped, said, no crash.
  EXPECT_EQ(events.Post(PodReference("ns", "p", "u"), "Normal", "Late", "after stop"), Posted::kDropped);
  events.Stop();
}

// Past the burst, events are skipped (one write each is what the rate saves), counted, and Post says so.
TEST(EventQueue, EventsOverTheRateAreSkippedAndCounted) {
  FakeApiServer server;
  ASSERT_TRUE(server.Start().ok());
  auto client = ClientOf(server);
  // A rate so low that no token comes back while the test runs: the burst is all there is.
  EventQueue events(*client, "mgpu-test", EventLimits{.per_second = 1e-6, .burst = 3, .capacity = 100});
  std::vector<Posted> posted;
  for (int i = 0; i < 10; ++i)
    posted.push_back(events.Post(PodReference("ns", "p" + std::to_string(i), "u"), "Normal", "R", "m"));
  events.Flush();
  EXPECT_EQ(std::count(posted.begin(), posted.end(), Posted::kQueued), 3);
  EXPECT_EQ(std::count(posted.begin(), posted.end(), Posted::kSkipped), 7);
  EXPECT_EQ(server.List("events", "ns").size(), 3u);
  const EventCounts counts = events.Counts();
  EXPECT_EQ(counts.created, 3u);
  EXPECT_EQ(counts.skipped, 7u);
  const std::string text = RenderEventCounts("mgpu_test", counts);
  EXPECT_NE(text.find("mgpu_test_events_total{outcome=\"created\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mgpu_test_events_total{outcome=\"skipped\"} 7\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace mgpu::kube
