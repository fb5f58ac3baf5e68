// The HTTP(S) server of both daemons: cpp-httplib's routing on a fixed pool of workers, with the connection
// handling written here so that no client can hold the workers:
// - a request must arrive whole (request line, headers, body) within `request_timeout` of its first byte (of
//   the connection's opening, for the first request, and the TLS handshake), and a response must be taken by
//   the client within `request_timeout` of its first byte; otherwise the connection is closed, with a 408 and
//   one sentence when the request was late. The time a handler takes is not counted.
// - an idle kept-alive connection is closed after `request_timeout`, and after kKeepAliveRequests requests;
// - at most `workers` connections are served at once, and one client address holds at most
//   `connections_per_client` of them, so other clients (the API server's webhook calls, probes, Prometheus)
//   always find a free worker. A connection over either bound is not refused but waits (before its TLS
//   handshake, so a client with kept-alive connections uses one of those meanwhile) until a worker is free
//   for it: kube-scheduler's concurrent binds are never turned away while the extender has capacity for them.
//   Only a connection that waited `request_timeout` in vain, or one beyond `connections_per_client` waiting
//   connections of its client, gets a 503 with one sentence;
// - an exception out of a handler is a 500 with one sentence naming the daemon; the log has the details;
// - with `http2` and TLS, a client that offers "h2" by ALPN (kube-scheduler's and the API server's Go
//   clients do) gets HTTP/2: its concurrent requests are streams of one connection, each run on a worker of
//   their own (at most `workers` at once over all connections), with the same bounds per stream
//   (http2_connection.h) and at most `connections_per_client` streams open per connection. Others get
//   HTTP/1.1 as above.
// Each refusal is logged with the client's address and counted (Counters()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>
#include <openssl/ssl.h>

#include "common/background.h"
#include "common/result.h"

namespace mgpu {

struct HttpLimits {
  int workers = 8;
  std::chrono::milliseconds request_timeout{10000};
  int connections_per_client = 6;
  size_t max_body_bytes = size_t{8} << 20;
  bool http2 = false;  // offer HTTP/2 over TLS (handlers that set_content only: no streamed responses)
};

// The connections refused so far (for /metrics).
struct HttpRefusals {
  uint64_t timed_out = 0;  // a request or response not through within request_timeout
  uint64_t busy = 0;       // no worker free for the connection in time (503)
};

// The refusals as a Prometheus counter <prefix>_http_connections_refused_total{reason="timeout"|"busy"}.
std::string RenderHttpRefusals(std::string_view prefix, const HttpRefusals& refusals);

// What the log says of an exception caught by a handler.
std::string DescribeException(std::exception_ptr exception);
// What a caller gets instead: `daemon` failed on this `what` request ..., one sentence.
std::string InternalErrorSentence(std::string_view daemon, std::string_view what);

// The server's workers: at most `max_threads`, each job handed to the worker that went idle last, a thread
// started only when every one is busy, jobs queued past `max_threads`. Each thread keeps what it touched (its
// stack's pages, malloc's per-thread cache and arena): handing jobs round the whole pool, as
// httplib::ThreadPool's shared condition variable does, left every one of the extender's 256 threads warm
// (about 18 MB of RSS after a few thousand requests); hot-first keeps as many warm as were ever busy at once.
// A worker idle for `idle_limit` ends its thread, so that what a burst warmed goes back once it is over (the
// thread's malloc cache returns to the arenas when it exits; the extender's trimmer then gives the pages
// back). Shutdown runs the queued jobs, then joins.
class WorkerPool : public httplib::TaskQueue {
 public:
  explicit WorkerPool(size_t max_threads, std::chrono::milliseconds idle_limit = std::chrono::minutes(1));
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void enqueue(std::function<void()> job) override;
  void shutdown() override;
  size_t Threads() const;  // running now
  size_t Idle() const;     // waiting for a job
  // Threads that every pool of the process ended after idling past their limit, so far.
  static uint64_t Retired();

 private:
  struct Worker {
    std::condition_variable wake;
    std::function<void()> job;
    std::thread thread;
  };
  void Run(Worker& worker);
  // Under the lock: `worker` leaves the pool; the caller joins what this returns, the workers that left
  // before it (their threads have ended or are ending), outside the lock.
  std::vector<std::unique_ptr<Worker>> Retire(Worker& worker);

  const size_t max_threads_;
  const std::chrono::milliseconds idle_limit_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::unique_ptr<Worker>> retired_;  // left the pool, not yet joined
  std::vector<Worker*> idle_;                     // the last to go idle at the back
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
};

class BoundedHttpServer {
 public:
  using Handler = httplib::Server::Handler;

  // `daemon` names the server in the sentences ("mgpu-scheduler-extender").
  BoundedHttpServer(std::string daemon, HttpLimits limits);
  ~BoundedHttpServer();
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  // Routes, before Start.
  void Get(const std::string& pattern, Handler handler);
  void Post(const std::string& pattern, Handler handler);
  // Listens on `address` ("host:port", port 0: a free one; `key` names the config key in the error) and
  // serves on a thread of its own; HTTPS when `tls_cert_file` and `tls_key_file` are both set.
  Status Start(const std::string& address, std::string_view key, const std::string& tls_cert_file = "",
               const std::string& tls_key_file = "");
  // Stops accepting, ends the connections being served and joins. Idempotent.
  void Stop();
  int port() const { return port_; }
  HttpRefusals Refusals() const;
  // Connections waiting for a worker now.
  int Waiting() const;

 private:
  class Server;

  const std::string daemon_;
  const HttpLimits limits_;
  std::unique_ptr<Server> server_;
  BackgroundThread thread_;
  int port_ = 0;
};

}  // namespace mgpu
