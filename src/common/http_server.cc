#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <regex>
#include <thread>
#include <utility>

#include "common/config.h"
#include "common/http2_connection.h"

namespace mgpu {
namespace {

using Clock = std::chrono::steady_clock;

// Requests one connection may carry before it is closed (clients open another).
constexpr int kKeepAliveRequests = 100;
// Bytes read from the socket at a time: the request line and headers are parsed a byte at a time.
constexpr size_t kReadBuffer = 16 * 1024;

// "ip" or "ip:port" of a socket's peer (`port` true) or of its own end.
std::string AddressOf(int fd, bool peer, int* port = nullptr) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) return "unknown";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    if (port) *port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    if (port) *port = ntohs(in6->sin6_port);
  }
  return text;
}

// The server's protocols by ALPN, HTTP/2 first: the first of them that the client offers.
int SelectProtocol(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                   unsigned int inlen, void*) {
  static constexpr unsigned char kProtocols[] = "\x02h2\x08http/1.1";
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kProtocols, sizeof(kProtocols) - 1, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// An exception out of a handler, over either protocol: logged, and answered 500 with one sentence.
void AnswerException(std::string_view daemon, const httplib::Request& req, httplib::Response& res,
                     std::exception_ptr exception) {
  spdlog::error("{} {}: {}", req.method, req.path, DescribeException(exception));
  res.status = 500;
  res.set_content(InternalErrorSentence(daemon, req.path) + "\n", "text/plain");
}

bool SpeaksHttp2(SSL* ssl) {
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &protocol, &length);
  return length == 2 && protocol[0] == 'h' && protocol[1] == '2';
}

enum class Wait { kReady, kTimedOut, kStopped, kFailed };

// Waits until `fd` has `events`, `deadline` passes, or `stop_fd` turns readable.
Wait WaitFor(int fd, short events, Clock::time_point deadline, int stop_fd) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Wait::kTimedOut;
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 60'000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Wait::kFailed;
    if (fds[1].revents) return Wait::kStopped;
    if (fds[0].revents & (POLLERR | POLLNVAL)) return Wait::kFailed;
    if (fds[0].revents) return Wait::kReady;  // readable, writable, or hung up (the read then says 0)
  }
}

// One accepted connection, plain or TLS, on a non-blocking socket: every wait ends at the deadline of the
// request being read or the response being written. Reading after writing starts the next request; writing
// after reading starts its response.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, SSL* ssl, int stop_fd, std::chrono::milliseconds timeout)
      : fd_(fd), ssl_(ssl), stop_fd_(stop_fd), timeout_(timeout), deadline_(Clock::now() + timeout) {}

  // The TLS handshake, within the deadline of the connection's opening (plain: nothing to do).
  bool Handshake() {
    if (!ssl_) return true;
    for (;;) {
      const int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      if (!AwaitFor(SSL_get_error(ssl_, rc))) return false;
    }
  }

  // Waits for the first byte of the next request: the first request keeps the deadline of the opening; a
  // later one may idle for the timeout (a normal end, not a refusal) and then has the timeout from its first
  // byte. False when no request comes.
  bool NextRequest() {
    const bool first = requests_++ == 0;
    reading_ = true;
    if (!first) deadline_ = Clock::now() + timeout_;  // the idle wait
    if (!Buffered()) {
      const Wait w = WaitFor(fd_, POLLIN, deadline_, stop_fd_);
      if (w == Wait::kTimedOut && first) timed_out_ = true;
      if (w != Wait::kReady) return false;
    }
    if (!first) deadline_ = Clock::now() + timeout_;  // the request, from its first byte
    return true;
  }

  bool timed_out() const { return timed_out_; }
  bool reading() const { return reading_; }

  // Answers `status` with one sentence and the end of the connection, with a deadline of its own.
  void Respond(int status, const char* reason, const std::string& sentence) {
    timed_out_ = false;
    reading_ = false;
    deadline_ = Clock::now() + timeout_;
    const std::string body = sentence + "\n";
    const std::string response =
        "HTTP/1.1 " + std::to_string(status) + " " + reason +
        "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    for (size_t sent = 0; sent < response.size();) {
      const ssize_t n = Send(response.data() + sent, response.size() - sent);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  bool is_readable() const override {
    auto* self = const_cast<Connection*>(this);
    self->Phase(true);
    return self->Buffered() || self->AwaitFor(SSL_ERROR_WANT_READ);
  }
  bool is_writable() const override {
    auto* self = const_cast<Connection*>(this);
    self->Phase(false);
    return !timed_out_ && WaitFor(fd_, POLLOUT, deadline_, stop_fd_) == Wait::kReady;
  }

  ssize_t read(char* ptr, size_t size) override {
    Phase(true);
    if (timed_out_) return -1;
    if (begin_ == end_) {
      if (size >= kReadBuffer) return Receive(ptr, size);
      const ssize_t n = Receive(buffer_, kReadBuffer);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    Phase(false);
    if (timed_out_) return -1;
    return Send(ptr, size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = AddressOf(fd_, true, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = AddressOf(fd_, false, &port); }
  socket_t socket() const override { return fd_; }

 private:
  bool Buffered() const { return begin_ < end_ || (ssl_ && SSL_pending(ssl_) > 0); }

  // Reading after writing is the next request (a 100 Continue aside); writing after reading, its response.
  // Once timed out the phase stays (what timed out is what the log says), and nothing more moves.
  void Phase(bool reading) {
    if (timed_out_ || reading_ == reading) return;
    reading_ = reading;
    deadline_ = Clock::now() + timeout_;
  }

  // Waits for what an operation needs (SSL_ERROR_WANT_READ or _WRITE; any other code is a failure).
  bool AwaitFor(int ssl_error) {
    if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE) return false;
    const Wait w = WaitFor(fd_, ssl_error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_, stop_fd_);
    if (w == Wait::kTimedOut) timed_out_ = true;
    return w == Wait::kReady;
  }

  ssize_t Receive(char* ptr, size_t size) {
    for (;;) {
      int need;
      if (ssl_) {
        const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
        if (n > 0) return n;
        need = SSL_get_error(ssl_, n);
        if (need == SSL_ERROR_ZERO_RETURN) return 0;
      } else {
        const ssize_t n = recv(fd_, ptr, size, 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        need = SSL_ERROR_WANT_READ;
      }
      if (!AwaitFor(need)) return -1;
    }
  }

  ssize_t Send(const char* ptr, size_t size) {
    for (;;) {
      int need;
      if (ssl_) {
        const int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
        if (n > 0) return n;
        need = SSL_get_error(ssl_, n);
      } else {
        const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        need = SSL_ERROR_WANT_WRITE;
      }
      if (!AwaitFor(need)) return -1;
    }
  }

  const int fd_;
  SSL* const ssl_;
  const int stop_fd_;
  const std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  bool reading_ = true;
  bool timed_out_ = false;
  int requests_ = 0;
  char buffer_[kReadBuffer];
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

std::string DescribeException(std::exception_ptr exception) {
  try {
    std::rethrow_exception(exception);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

std::string InternalErrorSentence(std::string_view daemon, std::string_view what) {
  return std::string(daemon) + " failed on this " + std::string(what) +
         " request with an internal error (its log has the details); retry";
}

std::string RenderHttpRefusals(std::string_view prefix, const HttpRefusals& refusals) {
  const std::string name = std::string(prefix) + "_http_connections_refused_total";
  return "# HELP " + name +
         " HTTP connections closed by the server's bounds: timeout (a request or response not through in "
         "time), busy (over the connections one client may hold).\n# TYPE " +
         name + " counter\n" + name + "{reason=\"timeout\"} " + std::to_string(refusals.timed_out) + "\n" +
         name + "{reason=\"busy\"} " + std::to_string(refusals.busy) + "\n";
}

// cpp-httplib's server with the handling of each accepted connection replaced (it is the one virtual step
// between accept and routing).
class BoundedHttpServer::Server final : public httplib::Server {
 public:
  Server(const std::string& daemon, const HttpLimits& limits)
      : daemon_(daemon), limits_(limits), streams_(static_cast<size_t>(limits.workers)) {
    std::signal(SIGPIPE, SIG_IGN);  // a peer gone while TLS writes must not end the process
    if (pipe2(stop_pipe_, O_CLOEXEC) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
  }
  ~Server() override {
    if (tls_) SSL_CTX_free(tls_);
    for (int fd : stop_pipe_)
      if (fd >= 0) close(fd);
  }

  void UseTls(SSL_CTX* tls) { tls_ = tls; }

  // The routes again, for HTTP/2 requests (httplib's routing reads HTTP/1.1 off a stream).
  void AddRoute(std::string method, const std::string& pattern, Handler handler) {
    routes_.push_back({std::move(method), std::regex(pattern), std::move(handler)});
  }
  // After the connections have ended: the HTTP/2 requests still in handlers finish.
  void DrainStreams() { streams_.shutdown(); }

  // Wakes every connection's wait, then stops accepting and joins the workers.
  void Halt() {
    if (stop_pipe_[1] >= 0 && !halted_.exchange(true)) {
      const char byte = 0;
      [[maybe_unused]] ssize_t n = ::write(stop_pipe_[1], &byte, 1);
    }
    {
      std::lock_guard lock(mu_);  // a waiting connection sees halted_ once woken
    }
    admitted_.notify_all();
    stop();
  }

  HttpRefusals Refusals() const { return {timed_out_.load(), busy_.load()}; }
  int Waiting() const {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [client, holding] : clients_) n += holding.waiting;
    return n;
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
    const int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string client = AddressOf(sock, true);
    SSL* ssl = nullptr;
    if (tls_) {
      ssl = SSL_new(tls_);
      if (ssl) SSL_set_fd(ssl, sock);
    }
    std::string refusal;
    const bool admitted = Admit(client, refusal);
    // The deadlines run from here: a connection's wait for a worker is not its client's time.
    Connection connection(sock, ssl, stop_pipe_[0], limits_.request_timeout);
    if ((!tls_ || ssl) && connection.Handshake()) {
      if (!admitted) {
        ++busy_;
        spdlog::warn("http client={} refused: {}", client, refusal);
        connection.Respond(503, "Service Unavailable", daemon_ + " " + refusal);
      } else if (ssl && SpeaksHttp2(ssl)) {
        ServeHttp2(sock, ssl, client);
      } else {
        Serve(connection, client);
      }
    } else if (connection.timed_out()) {
      TimedOut(connection, client);
    }
    if (admitted) Release(client);
    if (ssl) {
      SSL_shutdown(ssl);  // one try: the socket is non-blocking and the peer owes nothing
      SSL_free(ssl);
    }
    ERR_clear_error();
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return true;
  }

  void Serve(Connection& connection, const std::string& client) {
    for (int n = 0; n < kKeepAliveRequests && !halted_; ++n) {
      if (!connection.NextRequest()) break;
      bool closed = false;
      const bool served =
          process_request(connection, n + 1 == kKeepAliveRequests, closed, [](httplib::Request&) {});
      if (connection.timed_out()) break;
      if (!served || closed) break;
    }
    if (connection.timed_out()) TimedOut(connection, client);
  }

  void ServeHttp2(int sock, SSL* ssl, const std::string& client) {
    const Http2Bounds bounds{limits_.request_timeout, static_cast<uint32_t>(limits_.connections_per_client),
                             limits_.max_body_bytes};
    Http2Connection connection(
        sock, ssl, stop_pipe_[0], daemon_, client, bounds,
        [this](httplib::Request& req, httplib::Response& res) { Route(req, res); },
        [this](std::function<void()> job) { streams_.enqueue(std::move(job)); }, timed_out_);
    connection.Serve();
  }

  // What httplib's routing and exception handler do for an HTTP/1.1 request.
  void Route(httplib::Request& req, httplib::Response& res) const {
    for (const auto& route : routes_) {
      if (route.method != req.method || !std::regex_match(req.path, route.pattern)) continue;
      try {
        route.handler(req, res);
      } catch (...) {
        res = httplib::Response();
        AnswerException(daemon_, req, res, std::current_exception());
      }
      return;
    }
    res.status = 404;
  }

  void TimedOut(Connection& connection, const std::string& client) {
    ++timed_out_;
    const bool request = connection.reading();
    spdlog::warn("http client={} closed: {} not through within {} ms", client,
                 request ? "a request" : "a response", limits_.request_timeout.count());
    if (request)
      connection.Respond(408, "Request Timeout",
                         daemon_ + " closed this connection: the request did not arrive whole within " +
                             std::to_string(limits_.request_timeout.count()) + " ms");
  }

  // Takes a worker for a connection of `client`, waiting up to request_timeout while every worker is busy
  // or the client holds its share; false (with the sentence) when none came free in time, the client already
  // has as many connections waiting as it may hold, or the server stops.
  bool Admit(const std::string& client, std::string& refusal) {
    std::unique_lock lock(mu_);
    Holding& holding = clients_[client];
    const auto free_for_it = [&] {
      return serving_ < limits_.workers && holding.serving < limits_.connections_per_client;
    };
    if (!free_for_it()) {
      if (holding.waiting >= limits_.connections_per_client) {
        refusal = "already serves " + std::to_string(holding.serving) + " connections from " + client +
                  " and " + std::to_string(holding.waiting) +
                  " more wait, as many as one client may hold; retry when one of them is done";
        ForgetIfIdleLocked(client);
        return false;
      }
      ++holding.waiting;
      const bool freed =
          admitted_.wait_for(lock, limits_.request_timeout, [&] { return halted_.load() || free_for_it(); });
      --holding.waiting;
      if (!freed || halted_) {
        refusal = halted_ ? std::string("is stopping")
                          : "had no worker free for this connection from " + client + " within " +
                                std::to_string(limits_.request_timeout.count()) + " ms (" +
                                std::to_string(serving_) + " connections served, " +
                                std::to_string(holding.serving) + " of them from " + client + "); retry";
        ForgetIfIdleLocked(client);
        return false;
      }
    }
    ++serving_;
    ++holding.serving;
    return true;
  }
  void Release(const std::string& client) {
    {
      std::lock_guard lock(mu_);
      --serving_;
      --clients_[client].serving;
      ForgetIfIdleLocked(client);
    }
    admitted_.notify_all();
  }
  void ForgetIfIdleLocked(const std::string& client) {
    auto it = clients_.find(client);
    if (it != clients_.end() && it->second.serving == 0 && it->second.waiting == 0) clients_.erase(it);
  }

  struct Holding {
    int serving = 0;
    int waiting = 0;
  };
  struct RouteEntry {
    std::string method;
    std::regex pattern;
    Handler handler;
  };
  const std::string& daemon_;
  const HttpLimits& limits_;
  std::vector<RouteEntry> routes_;
  WorkerPool streams_;  // runs the HTTP/2 requests
  SSL_CTX* tls_ = nullptr;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> halted_{false};
  std::atomic<uint64_t> timed_out_{0};
  std::atomic<uint64_t> busy_{0};
  mutable std::mutex mu_;
  std::condition_variable admitted_;
  int serving_ = 0;
  std::map<std::string, Holding> clients_;
};

namespace {
std::atomic<uint64_t> g_retired_workers{0};
}  // namespace

WorkerPool::WorkerPool(size_t max_threads, std::chrono::milliseconds idle_limit)
    : max_threads_(std::max<size_t>(1, max_threads)), idle_limit_(idle_limit) {}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::enqueue(std::function<void()> job) {
  std::lock_guard lock(mu_);
  if (!idle_.empty()) {
    Worker* worker = idle_.back();
    idle_.pop_back();
    worker->job = std::move(job);
    worker->wake.notify_one();
  } else if (workers_.size() < max_threads_ && !stopping_) {
    workers_.push_back(std::make_unique<Worker>());
    Worker& worker = *workers_.back();
    worker.job = std::move(job);
    worker.thread = std::thread([this, &worker] { Run(worker); });  // Run waits for the lock held here
  } else {
    queue_.push_back(std::move(job));
  }
}

void WorkerPool::Run(Worker& worker) {
  std::unique_lock lock(mu_);
  for (;;) {
    std::function<void()> job;
    if (worker.job) {
      job = std::exchange(worker.job, nullptr);
    } else if (!queue_.empty()) {
      job = std::move(queue_.front());
      queue_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(&worker);
      const bool woken = worker.wake.wait_for(lock, idle_limit_, [&] { return worker.job || stopping_; });
      if (!worker.job) std::erase(idle_, &worker);  // stopping or idle too long: nobody took it off
      if (woken) continue;
      std::vector<std::unique_ptr<Worker>> earlier = Retire(worker);
      lock.unlock();
      for (auto& w : earlier) w->thread.join();
      return;
    }
    lock.unlock();
    job();
    job = nullptr;  // what the job captured goes before the worker counts as idle
    lock.lock();
  }
}

std::vector<std::unique_ptr<WorkerPool::Worker>> WorkerPool::Retire(Worker& worker) {
  std::vector<std::unique_ptr<Worker>> earlier = std::exchange(retired_, {});
  auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& w) { return w.get() == &worker; });
  retired_.push_back(std::move(*it));
  workers_.erase(it);
  g_retired_workers.fetch_add(1);
  return earlier;
}

void WorkerPool::shutdown() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (Worker* worker : idle_) worker->wake.notify_one();
    workers.swap(workers_);
    for (auto& w : retired_) workers.push_back(std::move(w));
    retired_.clear();
  }
  for (auto& w : workers) w->thread.join();
}

uint64_t WorkerPool::Retired() { return g_retired_workers.load(); }

size_t WorkerPool::Threads() const {
  std::lock_guard lock(mu_);
  return workers_.size();
}

size_t WorkerPool::Idle() const {
  std::lock_guard lock(mu_);
  return idle_.size();
}

BoundedHttpServer::BoundedHttpServer(std::string daemon, HttpLimits limits)
    : daemon_(std::move(daemon)), limits_(limits), server_(std::make_unique<Server>(daemon_, limits_)) {
  // Every serving worker, and as many threads again for connections waiting for one (Admit).
  server_->new_task_queue = [workers = limits_.workers] {
    return new WorkerPool(static_cast<size_t>(2 * workers));
  };
  server_->set_payload_max_length(limits_.max_body_bytes);
  server_->set_exception_handler(
      [daemon = daemon_](const httplib::Request& req, httplib::Response& res, std::exception_ptr exception) {
        AnswerException(daemon, req, res, exception);
      });
}

BoundedHttpServer::~BoundedHttpServer() { Stop(); }

void BoundedHttpServer::Get(const std::string& pattern, Handler handler) {
  server_->AddRoute("GET", pattern, handler);
  server_->Get(pattern, std::move(handler));
}

void BoundedHttpServer::Post(const std::string& pattern, Handler handler) {
  server_->AddRoute("POST", pattern, handler);
  server_->Post(pattern, std::move(handler));
}

Status BoundedHttpServer::Start(const std::string& address, std::string_view key,
                                const std::string& tls_cert_file, const std::string& tls_key_file) {
  Result<HostPort> listen = ParseHostPort(address, key);
  if (!listen.ok()) return Error{listen.message()};
  if (!tls_cert_file.empty() || !tls_key_file.empty()) {
    SSL_CTX* tls = SSL_CTX_new(TLS_server_method());
    const bool loaded = tls && SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION) == 1 &&
                        SSL_CTX_use_certificate_chain_file(tls, tls_cert_file.c_str()) == 1 &&
                        SSL_CTX_use_PrivateKey_file(tls, tls_key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
                        SSL_CTX_check_private_key(tls) == 1;
    ERR_clear_error();
    if (!loaded) {
      if (tls) SSL_CTX_free(tls);
      return Error{"cannot load the TLS certificate " + tls_cert_file + " and key " + tls_key_file};
    }
    if (limits_.http2) SSL_CTX_set_alpn_select_cb(tls, SelectProtocol, nullptr);
    server_->UseTls(tls);
  }
  port_ = listen->port == 0 ? server_->bind_to_any_port(listen->host)
                            : (server_->bind_to_port(listen->host, listen->port) ? listen->port : -1);
  if (port_ < 0) return Error{"cannot listen on " + address + " (" + std::string(key) + ")"};
  thread_.Start([this] { server_->listen_after_bind(); });
  // Until the loop runs, stop() would not end it: Stop must find it running.
  while (!server_->is_running()) std::this_thread::yield();
  return Status::Ok();
}

void BoundedHttpServer::Stop() {
  thread_.Stop([this] { server_->Halt(); });
  server_->DrainStreams();
}

HttpRefusals BoundedHttpServer::Refusals() const { return server_->Refusals(); }

int BoundedHttpServer::Waiting() const { return server_->Waiting(); }

}  // namespace mgpu
