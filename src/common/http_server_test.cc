#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

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
  int fd() const { return fd_; }
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

// A server with the test CA's certificate (its clients verify it).
class BoundedHttpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<testing::TestCerts> certs = testing::GenerateTestCerts(dir_.path());
    ASSERT_TRUE(certs.ok()) << certs.message();
    certs_ = *certs;
  }
  std::unique_ptr<BoundedHttpServer> ServingTls(HttpLimits limits, Gate* gate = nullptr) {
    auto server = Serving(limits, gate);
    if (!server->Start("127.0.0.1:0", "test.address", certs_.server_cert, certs_.server_key).ok())
      return nullptr;
    return server;
  }

  // GETs `path` with httplib's client (HTTP/1.1, no ALPN): the body, or what failed.
  std::string Http11Get(int port, const std::string& path) {
    httplib::SSLClient client("127.0.0.1", port);
    client.set_ca_cert_path(certs_.ca_cert.c_str());
    client.enable_server_certificate_verification(true);
    auto res = client.Get(path.c_str());
    return res ? res->body : "failed: " + httplib::to_string(res.error());
  }

  testing::TempDir dir_;
  testing::TestCerts certs_;
};

TEST_F(BoundedHttpsServerTest, ServesTlsAndBoundsTheHandshake) {
  HttpLimits limits;
  limits.request_timeout = 300ms;
  auto server = ServingTls(limits);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Http11Get(server->port(), "/hello"), "hi");
  // A client that never says hello is cut at the timeout (no 408: there is no TLS session to write it on).
  RawClient silent(server->port());
  ASSERT_TRUE(silent.ok());
  EXPECT_EQ(silent.ReadToEnd(), "");
  EXPECT_TRUE(silent.closed());
  EXPECT_EQ(server->Refusals().timed_out, 1u);
}

// Requests sent at once by libcurl over TLS (verified against the test CA), as streams of one connection
// where the server speaks HTTP/2. Each transfer gives up after 20 s: a bound on a failing test.
struct Exchange {
  Exchange(std::string path, std::string body = "") : path(std::move(path)), body(std::move(body)) {}
  std::string path;
  std::string body;  // POSTed when not empty
  long status = 0;
  std::string answer;
  long version = 0;   // CURL_HTTP_VERSION_*
  long connects = 0;  // connections this transfer opened
};

void ExchangeAll(std::vector<Exchange>& exchanges, int port, const std::string& ca_cert) {
  CURLM* multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  const auto collect = +[](char* data, size_t size, size_t n, void* into) {
    static_cast<std::string*>(into)->append(data, size * n);
    return size * n;
  };
  std::vector<CURL*> transfers;
  for (Exchange& e : exchanges) {
    CURL* curl = curl_easy_init();
    const std::string url = "https://127.0.0.1:" + std::to_string(port) + e.path;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_CAINFO, ca_cert.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(curl, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &e.answer);
    if (!e.body.empty()) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(e.body.size()));
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, e.body.c_str());
    }
    curl_multi_add_handle(multi, curl);
    transfers.push_back(curl);
  }
  for (int running = 1; running > 0;) {
    curl_multi_perform(multi, &running);
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  for (size_t i = 0; i < transfers.size(); ++i) {
    curl_easy_getinfo(transfers[i], CURLINFO_RESPONSE_CODE, &exchanges[i].status);
    curl_easy_getinfo(transfers[i], CURLINFO_HTTP_VERSION, &exchanges[i].version);
    curl_easy_getinfo(transfers[i], CURLINFO_NUM_CONNECTS, &exchanges[i].connects);
    curl_multi_remove_handle(multi, transfers[i]);
    curl_easy_cleanup(transfers[i]);
  }
  curl_multi_cleanup(multi);
}

// kube-scheduler's client offers HTTP/2: its concurrent binds then share one connection, each running on a
// worker of its own; the answers (404, a handler's exception) are those of HTTP/1.1.
TEST_F(BoundedHttpsServerTest, Http2ServesConcurrentRequestsAsStreamsOfOneConnection) {
  HttpLimits limits;
  limits.http2 = true;
  Gate gate;
  auto server = ServingTls(limits, &gate);
  ASSERT_NE(server, nullptr);
  std::vector<Exchange> exchanges = {{"/hold"},          {"/hold"},  {"/hold"},
                                     {"/echo", "hello"}, {"/throw"}, {"/nowhere"}};
  std::thread client([&] { ExchangeAll(exchanges, server->port(), certs_.ca_cert); });
  const bool held_at_once = gate.WaitHeld(3);  // the three holds in handlers together
  gate.Open();
  client.join();
  EXPECT_TRUE(held_at_once);
  long connects = 0;
  for (const Exchange& e : exchanges) {
    EXPECT_EQ(e.version, CURL_HTTP_VERSION_2_0) << e.path;
    connects += e.connects;
  }
  EXPECT_EQ(connects, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(exchanges[i].status, 200);
    EXPECT_EQ(exchanges[i].answer, "held");
  }
  EXPECT_EQ(exchanges[3].status, 200);
  EXPECT_EQ(exchanges[3].answer, "hello");
  EXPECT_EQ(exchanges[4].status, 500);
  EXPECT_EQ(
      exchanges[4].answer,
      "test-daemon failed on this /throw request with an internal error (its log has the details); retry\n");
  EXPECT_EQ(exchanges[5].status, 404);
  EXPECT_EQ(server->Refusals().timed_out, 0u);
}

// Without the option, or to a client that does not offer "h2" (httplib's), the server speaks HTTP/1.1.
TEST_F(BoundedHttpsServerTest, Http2OnlyWhenOfferedAndAsked) {
  for (bool http2 : {false, true}) {
    HttpLimits limits;
    limits.http2 = http2;
    auto server = ServingTls(limits);
    ASSERT_NE(server, nullptr);
    std::vector<Exchange> exchanges = {{"/hello"}};
    ExchangeAll(exchanges, server->port(), certs_.ca_cert);
    EXPECT_EQ(exchanges[0].answer, "hi");
    EXPECT_EQ(exchanges[0].version, http2 ? CURL_HTTP_VERSION_2_0 : CURL_HTTP_VERSION_1_1);
    EXPECT_EQ(Http11Get(server->port(), "/hello"), "hi");
  }
}

// A body over the bound is answered 413 with one sentence, and the connection goes on.
TEST_F(BoundedHttpsServerTest, Http2BodyOverTheBoundIs413) {
  HttpLimits limits;
  limits.http2 = true;
  limits.max_body_bytes = 100;
  auto server = ServingTls(limits);
  ASSERT_NE(server, nullptr);
  std::vector<Exchange> exchanges = {{"/echo", std::string(1000, 'x')}, {"/echo", "small"}};
  ExchangeAll(exchanges, server->port(), certs_.ca_cert);
  EXPECT_EQ(exchanges[0].status, 413);
  EXPECT_EQ(exchanges[0].answer, "test-daemon takes request bodies of at most 100 bytes\n");
  EXPECT_EQ(exchanges[1].status, 200);
  EXPECT_EQ(exchanges[1].answer, "small");
  EXPECT_EQ(exchanges[0].connects + exchanges[1].connects, 1);
}

// A bare HTTP/2 client (nghttp2's client session on a blocking TLS socket) for what libcurl cannot be: a
// client whose request body stops coming (libcurl does not read the answer of a paused upload). Reads give
// up after 10 s: a bound on a failing test.
class SlowHttp2Client {
 public:
  SlowHttp2Client(int port) : tcp_(port) {
    tls_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_alpn_protos(tls_, reinterpret_cast<const unsigned char*>("\x02h2"), 3);
    ssl_ = SSL_new(tls_);
    SSL_set_fd(ssl_, tcp_.fd());
    nghttp2_session_callbacks* callbacks;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(
        callbacks, +[](nghttp2_session*, const nghttp2_frame*, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* self) {
          if (std::string_view(reinterpret_cast<const char*>(name), namelen) == ":status")
            static_cast<SlowHttp2Client*>(self)->status_ =
                std::string(reinterpret_cast<const char*>(value), valuelen);
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        callbacks, +[](nghttp2_session*, uint8_t, int32_t, const uint8_t* data, size_t len, void* self) {
          static_cast<SlowHttp2Client*>(self)->answer_.append(reinterpret_cast<const char*>(data), len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        callbacks, +[](nghttp2_session*, int32_t, uint32_t, void* self) {
          static_cast<SlowHttp2Client*>(self)->closed_ = true;
          return 0;
        });
    nghttp2_session_client_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
  }
  ~SlowHttp2Client() {
    nghttp2_session_del(session_);
    SSL_free(ssl_);
    SSL_CTX_free(tls_);
  }

  // POSTs `path` with a content-length of 10 and sends 3 bytes of it; returns the status and body of the
  // answer ("" when none came).
  std::pair<std::string, std::string> PostThreeBytesOfTen(const std::string& path) {
    if (!tcp_.ok() || SSL_connect(ssl_) != 1) return {};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
    std::string authority = "127.0.0.1";
    std::vector<std::pair<std::string, std::string>> fields = {{":method", "POST"},
                                                               {":scheme", "https"},
                                                               {":authority", authority},
                                                               {":path", path},
                                                               {"content-length", "10"}};
    std::vector<nghttp2_nv> nva;
    for (auto& [name, value] : fields)
      nva.push_back({reinterpret_cast<uint8_t*>(name.data()), reinterpret_cast<uint8_t*>(value.data()),
                     name.size(), value.size(), NGHTTP2_NV_FLAG_NONE});
    nghttp2_data_provider body{};
    body.read_callback = +[](nghttp2_session*, int32_t, uint8_t* buf, size_t, uint32_t*,
                             nghttp2_data_source* sent, void*) -> ssize_t {
      if (std::exchange(sent->ptr, nullptr) == nullptr) return NGHTTP2_ERR_DEFERRED;
      std::memcpy(buf, "abc", 3);
      return 3;
    };
    body.source.ptr = this;
    nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &body, nullptr);
    uint8_t buffer[16 * 1024];
    while (!closed_) {
      const uint8_t* out;
      for (ssize_t n; (n = nghttp2_session_mem_send(session_, &out)) > 0;)
        if (SSL_write(ssl_, out, static_cast<int>(n)) <= 0) return {status_, answer_};
      const int n = SSL_read(ssl_, buffer, sizeof(buffer));
      if (n <= 0 || nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(n)) < 0) break;
    }
    return {status_, answer_};
  }

 private:
  RawClient tcp_;
  SSL_CTX* tls_ = nullptr;
  SSL* ssl_ = nullptr;
  nghttp2_session* session_ = nullptr;
  std::string status_;
  std::string answer_;
  bool closed_ = false;
};

// A request whose body stops coming is answered 408 with one sentence; the others on its connection are not
// held up by it.
TEST_F(BoundedHttpsServerTest, Http2RequestThatDoesNotArriveWholeIs408) {
  HttpLimits limits;
  limits.http2 = true;
  limits.request_timeout = 300ms;
  auto server = ServingTls(limits);
  ASSERT_NE(server, nullptr);
  SlowHttp2Client slow(server->port());
  const auto [status, answer] = slow.PostThreeBytesOfTen("/echo");
  EXPECT_EQ(status, "408");
  EXPECT_EQ(answer, "test-daemon did not get this request whole within 300 ms\n");
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
