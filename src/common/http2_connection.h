// One HTTP/2 connection (RFC 9113) of BoundedHttpServer, after a TLS handshake that chose "h2" by ALPN:
// kube-scheduler's Go client speaks HTTP/2 to a TLS extender that offers it, and then sends all of its
// concurrent calls as streams of one connection, where over HTTP/1.1 it keeps at most two idle connections
// and opens a new one (a TLS handshake on both sides) for each call beyond them: ~1,600 connections per
// 2,000 pods (bench/RESULTS.md section 5).
//
// The thread that accepted the connection runs its frames (nghttp2's server session, non-blocking socket);
// each request, once whole, runs on `run` (the server's workers), several at once, and its response goes back
// on the same connection. The bounds are those of an HTTP/1.1 connection, per stream:
// - a request must arrive whole within `timeout` of its first frame: otherwise it is answered 408 with one
//   sentence; a response must be taken by the client within `timeout` of being ready: otherwise the stream
//   is reset. The time a handler takes is not counted;
// - at most `max_streams` requests are open at once (SETTINGS_MAX_CONCURRENT_STREAMS), so one connection
//   holds at most that many workers, as one client holds at most that many HTTP/1.1 connections;
// - a body over `max_body_bytes` is answered 413 with one sentence;
// - the connection ends when the client ends it, after `timeout` with no request open, when the client does
//   not take what the server writes within `timeout`, or when `stop_fd` turns readable (the server stops).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <httplib.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

namespace mgpu {

// The server's HttpLimits, per stream (set from them: no defaults of their own).
struct Http2Bounds {
  std::chrono::milliseconds timeout;
  uint32_t max_streams;
  size_t max_body_bytes;
};

class Http2Connection {
 public:
  // Answers one request (routing, handler, exceptions): called on `run`'s threads.
  using Handle = std::function<void(httplib::Request&, httplib::Response&)>;
  using Run = std::function<void(std::function<void()>)>;

  // `fd` is non-blocking and `ssl` has finished its handshake; `daemon` names the server in the sentences,
  // `client` is the peer's address (the requests' remote_addr); `timed_out` counts each request answered
  // 408 and each response (or the connection's frames) not taken in time.
  Http2Connection(int fd, SSL* ssl, int stop_fd, std::string daemon, std::string client, Http2Bounds bounds,
                  Handle handle, Run run, std::atomic<uint64_t>& timed_out);
  ~Http2Connection();
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  // Serves until the connection ends (see above). Requests still in a handler then finish on their workers
  // and their responses are dropped.
  void Serve();

 private:
  using Clock = std::chrono::steady_clock;
  struct Stream {
    httplib::Request request;
    Clock::time_point deadline;  // the request's arrival, then the response's taking; none in a handler
    bool request_whole = false;
    bool in_handler = false;
    bool responding = false;
    bool too_large = false;
    size_t header_bytes = 0;
    std::string body;  // the response's
    size_t body_sent = 0;
  };
  struct Done;

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t flags, void* self);
  static int OnDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data, size_t len,
                         void* self);
  static int OnFrameReceived(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnFrameSent(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* self);
  static ssize_t ReadBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void* self);

  // The request of `stream_id` is whole: to a worker, or answered 413.
  void Dispatch(int32_t stream_id);
  // Submits `res` on the stream, if it is still open.
  void Respond(int32_t stream_id, httplib::Response res);
  void RespondWithSentence(int32_t stream_id, int status, const std::string& sentence);
  // Reads what the socket has and feeds it to the session; false when the client has gone or broke the
  // protocol.
  bool Receive();
  // Writes what the session has to send, as far as the socket takes it; false on a broken connection.
  bool Send();
  // Streams past their deadline: 408 or reset. The earliest deadline still ahead.
  Clock::time_point ExpireStreams(Clock::time_point now);

  const int fd_;
  SSL* const ssl_;
  const int stop_fd_;
  const std::string daemon_;
  const std::string client_;
  const Http2Bounds bounds_;
  const Handle handle_;
  const Run run_;
  std::atomic<uint64_t>& timed_out_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Stream> streams_;
  std::shared_ptr<Done> done_;  // shared with the requests on workers, which may outlive the connection
  int in_handlers_ = 0;
  std::string out_;  // frames the socket has not taken yet
  size_t out_sent_ = 0;
  Clock::time_point out_deadline_;
  Clock::time_point last_activity_;
};

}  // namespace mgpu
