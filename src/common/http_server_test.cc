#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "support/test_certs.h"
#include "testing/test_env.h"

namespace mgpu {
namespace {

using namespace std::chrono_literals;
using mgpu::testing::WaitUntil;

// A raw TCP client from `source` (any 127.0.0.0/8 address is this host), so a test can be a slow or a
// second client. Reads give up after 10 s: a bound on a failing test, not a timing assumption.
class RawClient {
 public:
  RawClient(int port, const char* source = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) == 0;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
    timeval limit{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  }
  ~RawClient() { close(fd_); }
  bool ok() const { return bound_ && connected_; }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  // Everything until the server closes (or the 10 s bound: then closed() is false).
  std::string ReadToEnd() {
    std::string all;
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd_, buffer, sizeof(buffer), 0)) > 0) all.append(buffer, static_cast<size_t>(n));
    closed_ = n == 0 || (n < 0 && errno == ECONNRESET);
    return all;
  }
  bool closed() const { return closed_; }
  // One response's head and its Content-Length body.
  std::string ReadResponse() {
    std::string all;
    char byte;
    while (all.find("\r\n\r\n") == std::string::npos && recv(fd_, &byte, 1, 0) == 1) all += byte;
    const size_t at = all.find("Content-Length: ");
    size_t length = at == std::string::npos ? 0 : std::stoul(all.substr(at + 16));
    while (length > 0 && recv(fd_, &byte, 1, 0) == 1) {
      all += byte;
      --length;
    }
    return all;
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
  bool connected_ = false;
  bool closed_ = false;
};

// A handler that holds its request until released, counting those it holds.
class Gate {
 public:
  void Hold() {
    std::unique_lock lock(mu_);
    ++held_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }
  bool WaitHeld(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 10s, [&] { return held_ >= n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int held_ = 0;
  bool open_ = false;
};

std::unique_ptr<BoundedHttpServer> Serving(HttpLimits limits, Gate* gate = nullptr) {
  auto server = std::make_unique<BoundedHttpServer>("test-daemon", limits);
  server->Get("/hello",
              [](const httplib::Request&, httplib::Response& res) { res.set_content("hi", "text/plain"); });
  server->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body, "text/plain");
  });
  server->Get("/throw",
              [](const httplib::Request&, httplib::Response&) { throw std::runtime_error("boom"); });
  if (gate)
    server->Get("/hold", [gate](const httplib::Request&, httplib::Response& res) {
      gate->Hold();
      res.set_content("held", "text/plain");
    });
  return server;
}

TEST(BoundedHttpServerTest, ServesRequestsOnOneKeptAliveConnection) {
  auto server = Serving({});
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  RawClient client(server->port());
  ASSERT_TRUE(client.ok());
  client.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(client.ReadResponse().find("\r\n\r\nhi"), std::string::npos);
  client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  const std::string second = client.ReadResponse();
  EXPECT_NE(second.find("200 OK"), std::string::npos) << second;
  EXPECT_NE(second.find("\r\n\r\nhello"), std::string::npos) << second;
  EXPECT_EQ(server->Refusals().timed_out, 0u);
}

// A client that leaves a body unfinished, and one that sends nothing at all.
TEST(BoundedHttpServerTest, ARequestThatDoesNotArriveWholeIsAnswered408AndClosed) {
  HttpLimits limits;
  limits.request_timeout = 300ms;
  auto server = Serving(limits);
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  RawClient slow(server->port()), silent(server->port());
  ASSERT_TRUE(slow.ok() && silent.ok());
  slow.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");  // 7 bytes owed, never sent
  for (RawClient* client : {&slow, &silent}) {
    const std::string answer = client->ReadToEnd();
    EXPECT_TRUE(client->closed());
    EXPECT_NE(answer.find("HTTP/1.1 408 Request Timeout"), std::string::npos) << answer;
    EXPECT_NE(
        answer.find("test-daemon closed this connection: the request did not arrive whole within 300 ms"),
        std::string::npos)
        << answer;
  }
  EXPECT_EQ(server->Refusals().timed_out, 2u);
}

// The timeout bounds the client's sending, not the handler's work.
TEST(BoundedHttpServerTest, AHandlerSlowerThanTheTimeoutIsAnswered) {
  HttpLimits limits;
  limits.request_timeout = 200ms;
  auto server = std::make_unique<BoundedHttpServer>("test-daemon", limits);
  server->Get("/slow", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(600ms);  // the subject of the test: a handler working past the timeout
    res.set_content("done", "text/plain");
  });
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/slow");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "done");
  EXPECT_EQ(server->Refusals().timed_out, 0u);
}

// A client holding its share waits for its next worker rather than being refused (kube-scheduler's
// concurrent binds), while another client still finds a free worker at once.
TEST(BoundedHttpServerTest, OneClientCannotHoldEveryWorkerAndItsNextConnectionWaits) {
  HttpLimits limits;
  limits.workers = 3;
  limits.connections_per_client = 2;
  Gate gate;
  auto server = Serving(limits, &gate);
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  // 127.0.0.2 takes its two workers...
  // (each closes after its answer: a kept-alive connection keeps its worker until it goes idle, and a client
  // with one uses it rather than wait for a new one)
  RawClient first(server->port(), "127.0.0.2"), second(server->port(), "127.0.0.2");
  ASSERT_TRUE(first.ok() && second.ok());
  first.Send("GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(gate.WaitHeld(1));
  second.Send("GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(gate.WaitHeld(2));
  // ...a third connection from it waits for one of them...
  RawClient third(server->port(), "127.0.0.2");
  ASSERT_TRUE(third.ok());
  third.Send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(WaitUntil([&] { return server->Waiting() == 1; }));
  // ...another client still finds the third worker...
  RawClient other(server->port(), "127.0.0.1");
  ASSERT_TRUE(other.ok());
  other.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(other.ReadResponse().find("\r\n\r\nhi"), std::string::npos);
  // ...and once the first two are answered, the third is served.
  gate.Open();
  EXPECT_NE(first.ReadResponse().find("held"), std::string::npos);
  EXPECT_NE(second.ReadResponse().find("held"), std::string::npos);
  EXPECT_NE(third.ReadResponse().find("held"), std::string::npos);
  EXPECT_EQ(server->Refusals().busy, 0u);
}

// A connection is refused only when no worker came free for it within the request timeout, or when its
// client already has as many connections waiting as it may hold.
TEST(BoundedHttpServerTest, AConnectionRefusedOnlyAfterWaitingInVainOrOverTheWaitingBound) {
  HttpLimits limits;
  limits.workers = 3;
  limits.connections_per_client = 1;
  limits.request_timeout = 3s;  // long enough for the next connection to come while one waits
  Gate gate;
  auto server = Serving(limits, &gate);
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  RawClient holder(server->port(), "127.0.0.2");
  ASSERT_TRUE(holder.ok());
  holder.Send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(gate.WaitHeld(1));
  RawClient waiting(server->port(), "127.0.0.2");
  ASSERT_TRUE(waiting.ok());
  ASSERT_TRUE(WaitUntil([&] { return server->Waiting() == 1; }));
  RawClient over(server->port(), "127.0.0.2");
  ASSERT_TRUE(over.ok());
  const std::string at_once = over.ReadToEnd();
  EXPECT_NE(at_once.find("HTTP/1.1 503"), std::string::npos) << at_once;
  EXPECT_NE(at_once.find("test-daemon already serves 1 connections from 127.0.0.2 and 1 more wait"),
            std::string::npos)
      << at_once;
  const std::string in_vain = waiting.ReadToEnd();  // the holder never lets go within the timeout
  EXPECT_NE(in_vain.find("HTTP/1.1 503"), std::string::npos) << in_vain;
  EXPECT_NE(in_vain.find("test-daemon had no worker free for this connection from 127.0.0.2 within 3000 ms"),
            std::string::npos)
      << in_vain;
  EXPECT_EQ(server->Refusals().busy, 2u);
  gate.Open();
  EXPECT_NE(holder.ReadResponse().find("held"), std::string::npos);
}

TEST(BoundedHttpServerTest, AnExceptionIsA500WithOneSentence) {
  auto server = Serving({});
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/throw");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_EQ(
      res->body,
      "test-daemon failed on this /throw request with an internal error (its log has the details); retry\n");
  // The worker survived it.
  auto again = client.Get("/hello");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body, "hi");
}

TEST(BoundedHttpServerTest, ServesTlsAndBoundsTheHandshake) {
  testing::TempDir dir;
  Result<testing::TestCerts> certs = testing::GenerateTestCerts(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.message();
  HttpLimits limits;
  limits.request_timeout = 300ms;
  auto server = Serving(limits);
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address", certs->server_cert, certs->server_key).ok());
  httplib::SSLClient client("127.0.0.1", server->port());
  client.set_ca_cert_path(certs->ca_cert.c_str());
  client.enable_server_certificate_verification(true);
  auto res = client.Get("/hello");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->body, "hi");
  // A client that never says hello is cut at the timeout (no 408: there is no TLS session to write it on).
  RawClient silent(server->port());
  ASSERT_TRUE(silent.ok());
  EXPECT_EQ(silent.ReadToEnd(), "");
  EXPECT_TRUE(silent.closed());
  EXPECT_EQ(server->Refusals().timed_out, 1u);
}

TEST(BoundedHttpServerTest, StopEndsTheConnectionsItIsServing) {
  HttpLimits limits;
  limits.request_timeout = 60s;  // the kept-alive connection could idle that long: Stop does not wait for it
  auto server = Serving(limits);
  ASSERT_TRUE(server->Start("127.0.0.1:0", "test.address").ok());
  RawClient idle(server->port());
  ASSERT_TRUE(idle.ok());
  idle.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(idle.ReadResponse().find("hi"), std::string::npos);
  std::thread stopper([&] { server->Stop(); });
  EXPECT_EQ(idle.ReadToEnd(), "");
  EXPECT_TRUE(idle.closed()) << "still open after 10 s";
  stopper.join();
  server->Stop();
}

TEST(BoundedHttpServerTest, BadAddressesAndCertificatesAreOneSentence) {
  auto server = Serving({});
  Status bad = server->Start("nowhere", "test.address");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("test.address"), std::string::npos) << bad.message();
  Status no_tls = server->Start("127.0.0.1:0", "test.address", "/nonexistent.crt", "/nonexistent.key");
  ASSERT_FALSE(no_tls.ok());
  EXPECT_EQ(no_tls.message(), "cannot load the TLS certificate /nonexistent.crt and key /nonexistent.key");
}

TEST(WorkerPoolTest, HandsEachJobToTheWorkerThatWentIdleLast) {
  WorkerPool pool(16);
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 50; ++i) {
    pool.enqueue([&] {
      std::lock_guard lock(mu);
      ran_on.insert(std::this_thread::get_id());
    });
    ASSERT_TRUE(WaitUntil([&] { return pool.Idle() == 1; }, 10s));
  }
  EXPECT_EQ(pool.Threads(), 1u);  // httplib::ThreadPool ran them on its threads in turn
  EXPECT_EQ(ran_on.size(), 1u);
}

TEST(WorkerPoolTest, StartsAThreadOnlyWhenEveryWorkerIsBusyAndQueuesPastItsBound) {
  Gate gate;
  std::atomic<int> held{0}, quick{0};
  {
    WorkerPool pool(3);
    for (int i = 0; i < 3; ++i)
      pool.enqueue([&] {
        gate.Hold();
        ++held;
      });
    EXPECT_EQ(pool.Threads(), 3u);
    EXPECT_EQ(pool.Idle(), 0u);
    for (int i = 0; i < 4; ++i) pool.enqueue([&] { ++quick; });  // queued: no thread is free
    EXPECT_EQ(pool.Threads(), 3u);
    gate.Open();
    ASSERT_TRUE(WaitUntil([&] { return pool.Idle() == 3; }, 10s));
    pool.enqueue([&] { ++quick; });  // an idle worker takes it
    EXPECT_EQ(pool.Threads(), 3u);
  }  // shutdown: every job ran
  EXPECT_EQ(held.load(), 3);
  EXPECT_EQ(quick.load(), 5);
}

TEST(WorkerPoolTest, AWorkerIdlePastItsLimitEndsItsThread) {
  Gate gate;
  std::atomic<int> ran{0};
  const uint64_t retired = WorkerPool::Retired();
  WorkerPool pool(4, 50ms);
  for (int i = 0; i < 3; ++i)
    pool.enqueue([&] {
      gate.Hold();
      ++ran;
    });
  EXPECT_EQ(pool.Threads(), 3u);
  gate.Open();  // the burst is over: each of its three threads ends once idle past the limit
  ASSERT_TRUE(WaitUntil([&] { return pool.Threads() == 0; }, 10s));
  EXPECT_EQ(WorkerPool::Retired() - retired, 3u);
  EXPECT_EQ(pool.Idle(), 0u);
  pool.enqueue([&] { ++ran; });  // the next job starts a thread again
  ASSERT_TRUE(WaitUntil([&] { return ran.load() == 4; }, 10s));
}

TEST(WorkerPoolTest, ShutdownRunsTheQueuedJobsThenJoins) {
  Gate gate;
  std::atomic<int> ran{0}, held{0};
  WorkerPool pool(1);
  pool.enqueue([&] {
    gate.Hold();
    ++held;
  });
  for (int i = 0; i < 5; ++i) pool.enqueue([&] { ++ran; });
  std::thread stopper([&] { pool.shutdown(); });
  gate.Open();
  stopper.join();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_EQ(held.load(), 1);
  pool.enqueue([&] { ++ran; });  // after shutdown: queued, never run, no thread started
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace mgpu
