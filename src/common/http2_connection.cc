#include "common/http2_connection.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <mutex>
#include <utility>
#include <vector>

namespace mgpu {
namespace {

// The receive window per stream and for the connection: a filter request with 1,000 node names (~50 KB)
// arrives without waiting for a WINDOW_UPDATE.
constexpr int32_t kWindow = 1 << 20;
// Bytes of frames gathered for one TLS write.
constexpr size_t kWriteChunk = 64 * 1024;
// Bytes of header fields one request may carry.
constexpr size_t kMaxHeaderBytes = 64 * 1024;

// Response header fields that HTTP/2 forbids (connection-specific) or that are written here.
bool DroppedField(const std::string& name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "content-length";
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

// The responses the workers hand back, and the eventfd that wakes the connection's thread for them.
struct Http2Connection::Done {
  Done() : fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~Done() {
    if (fd >= 0) close(fd);
  }
  void Post(int32_t stream_id, httplib::Response res) {
    {
      std::lock_guard lock(mu);
      responses.emplace_back(stream_id, std::move(res));
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd, &one, sizeof(one));
  }
  std::vector<std::pair<int32_t, httplib::Response>> Take() {
    uint64_t count;
    [[maybe_unused]] ssize_t n = read(fd, &count, sizeof(count));
    std::lock_guard lock(mu);
    return std::exchange(responses, {});
  }

  const int fd;
  std::mutex mu;
  std::vector<std::pair<int32_t, httplib::Response>> responses;
};

Http2Connection::Http2Connection(int fd, SSL* ssl, int stop_fd, std::string daemon, std::string client,
                                 Http2Bounds bounds, Handle handle, Run run, std::atomic<uint64_t>& timed_out)
    : fd_(fd),
      ssl_(ssl),
      stop_fd_(stop_fd),
      daemon_(std::move(daemon)),
      client_(std::move(client)),
      bounds_(bounds),
      handle_(std::move(handle)),
      run_(std::move(run)),
      timed_out_(timed_out),
      done_(std::make_shared<Done>()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) return;
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, OnDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameReceived);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, OnFrameSent);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, OnStreamClose);
  if (nghttp2_session_server_new(&session_, callbacks, this) != 0) session_ = nullptr;
  nghttp2_session_callbacks_del(callbacks);
}

Http2Connection::~Http2Connection() {
  if (session_) nghttp2_session_del(session_);
}

void Http2Connection::Serve() {
  if (!session_ || done_->fd < 0) return;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, bounds_.max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kWindow},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kWindow);
  last_activity_ = Clock::now();
  for (;;) {
    if (!Send()) break;
    if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_) && out_.empty())
      break;  // a GOAWAY each way: nothing more will move
    const Clock::time_point now = Clock::now();
    Clock::time_point deadline = ExpireStreams(now);
    if (!Send()) break;  // the 408s and resets just submitted
    if (!out_.empty()) {
      if (now >= out_deadline_) {
        ++timed_out_;
        spdlog::warn("http2 client={} closed: the client took nothing written to it within {} ms", client_,
                     bounds_.timeout.count());
        break;
      }
      deadline = std::min(deadline, out_deadline_);
    }
    if (streams_.empty() && in_handlers_ == 0) {
      const Clock::time_point idle_end = last_activity_ + bounds_.timeout;
      if (now >= idle_end) {  // a normal end, not a refusal
        nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
        Send();
        break;
      }
      deadline = std::min(deadline, idle_end);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd fds[3] = {{fd_, static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0},
                     {done_->fd, POLLIN, 0},
                     {stop_fd_, POLLIN, 0}};
    const int n = poll(fds, 3, static_cast<int>(std::clamp<int64_t>(wait, 0, 60'000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (fds[2].revents) {  // the server stops: say so, and go
      nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
      Send();
      break;
    }
    if (fds[1].revents) {
      for (auto& [stream_id, res] : done_->Take()) {
        --in_handlers_;
        Respond(stream_id, std::move(res));
      }
    }
    if (fds[0].revents & (POLLERR | POLLNVAL)) break;
    if ((fds[0].revents & (POLLIN | POLLHUP)) && !Receive()) break;
  }
}

bool Http2Connection::Receive() {
  uint8_t buffer[16 * 1024];
  for (;;) {
    const int n = SSL_read(ssl_, buffer, sizeof(buffer));
    if (n > 0) {
      last_activity_ = Clock::now();
      if (nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(n)) < 0) return false;
      continue;
    }
    const int error = SSL_get_error(ssl_, n);
    return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE;  // else closed, or broken
  }
}

bool Http2Connection::Send() {
  for (;;) {
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_sent_ = 0;
      while (out_.size() < kWriteChunk) {
        const uint8_t* data = nullptr;
        const ssize_t n = nghttp2_session_mem_send(session_, &data);
        if (n < 0) return false;
        if (n == 0) break;
        out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
      }
      if (out_.empty()) return true;
      out_deadline_ = Clock::now() + bounds_.timeout;
    }
    // A retried SSL_write must pass the same bytes: out_ does not change until they are all taken.
    const int n = SSL_write(ssl_, out_.data() + out_sent_, static_cast<int>(out_.size() - out_sent_));
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
      out_deadline_ = Clock::now() + bounds_.timeout;
      continue;
    }
    const int error = SSL_get_error(ssl_, n);
    return error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ;  // poll says when to go on
  }
}

Http2Connection::Clock::time_point Http2Connection::ExpireStreams(Clock::time_point now) {
  Clock::time_point next = Clock::time_point::max();
  // A stream the session closed without telling (one it refused) has no business here.
  std::erase_if(streams_, [&](const auto& entry) {
    return nghttp2_session_find_stream(session_, entry.first) == nullptr;
  });
  for (auto& [stream_id, stream] : streams_) {
    if (stream.in_handler || stream.deadline == Clock::time_point::max()) continue;
    if (stream.deadline > now) {
      next = std::min(next, stream.deadline);
    } else if (!stream.responding) {
      ++timed_out_;
      spdlog::warn("http2 client={} stream={} answered 408: the request did not arrive whole within {} ms",
                   client_, stream_id, bounds_.timeout.count());
      RespondWithSentence(stream_id, 408,
                          daemon_ + " did not get this request whole within " +
                              std::to_string(bounds_.timeout.count()) + " ms");
      next = std::min(next, stream.deadline);
    } else {
      ++timed_out_;
      spdlog::warn("http2 client={} stream={} reset: its response was not taken within {} ms", client_,
                   stream_id, bounds_.timeout.count());
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
      stream.deadline = Clock::time_point::max();
    }
  }
  return next;
}

void Http2Connection::Dispatch(int32_t stream_id) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  Stream& stream = it->second;
  stream.request_whole = true;
  if (stream.too_large)
    return RespondWithSentence(
        stream_id, 413,
        daemon_ + " takes request bodies of at most " + std::to_string(bounds_.max_body_bytes) + " bytes");
  stream.in_handler = true;
  ++in_handlers_;
  run_([done = done_, handle = handle_, stream_id, req = std::move(stream.request)]() mutable {
    httplib::Response res;
    handle(req, res);
    done->Post(stream_id, std::move(res));
  });
}

void Http2Connection::Respond(int32_t stream_id, httplib::Response res) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;  // the client reset it meanwhile
  Stream& stream = it->second;
  stream.in_handler = false;
  stream.responding = true;
  stream.deadline = Clock::now() + bounds_.timeout;
  stream.body = std::move(res.body);
  stream.body_sent = 0;
  std::vector<std::pair<std::string, std::string>> fields;
  fields.emplace_back(":status", std::to_string(res.status < 0 ? 200 : res.status));
  for (const auto& [name, value] : res.headers) {
    std::string lower = Lower(name);
    if (!DroppedField(lower)) fields.emplace_back(std::move(lower), value);
  }
  fields.emplace_back("content-length", std::to_string(stream.body.size()));
  std::vector<nghttp2_nv> nva;
  for (auto& [name, value] : fields)
    nva.push_back({reinterpret_cast<uint8_t*>(name.data()), reinterpret_cast<uint8_t*>(value.data()),
                   name.size(), value.size(), NGHTTP2_NV_FLAG_NONE});
  nghttp2_data_provider body{};
  body.read_callback = ReadBody;
  if (nghttp2_submit_response(session_, stream_id, nva.data(), nva.size(),
                              stream.body.empty() ? nullptr : &body) != 0)
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_INTERNAL_ERROR);
  last_activity_ = Clock::now();
}

void Http2Connection::RespondWithSentence(int32_t stream_id, int status, const std::string& sentence) {
  httplib::Response res;
  res.status = status;
  res.set_content(sentence + "\n", "text/plain");
  Respond(stream_id, std::move(res));
}

int Http2Connection::OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* self) {
  auto* c = static_cast<Http2Connection*>(self);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  Stream& stream = c->streams_[frame->hd.stream_id];
  stream.deadline = Clock::now() + c->bounds_.timeout;
  stream.request.remote_addr = c->client_;
  stream.request.version = "HTTP/2";
  return 0;
}

int Http2Connection::OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                              size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* self) {
  auto* c = static_cast<Http2Connection*>(self);
  auto it = c->streams_.find(frame->hd.stream_id);
  if (it == c->streams_.end()) return 0;
  Stream& stream = it->second;
  stream.header_bytes += namelen + valuelen;
  if (stream.header_bytes > kMaxHeaderBytes) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  const std::string key(reinterpret_cast<const char*>(name), namelen);
  std::string text(reinterpret_cast<const char*>(value), valuelen);
  httplib::Request& req = stream.request;
  if (key == ":method") {
    req.method = std::move(text);
  } else if (key == ":path") {
    req.target = text;
    const size_t query = text.find('?');
    req.path = text.substr(0, query);
    if (query != std::string::npos) httplib::detail::parse_query_text(text.substr(query + 1), req.params);
  } else if (key == ":authority") {
    req.headers.emplace("Host", std::move(text));
  } else if (!key.starts_with(':')) {
    req.headers.emplace(key, std::move(text));
  }
  return 0;
}

int Http2Connection::OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                                 size_t len, void* self) {
  auto* c = static_cast<Http2Connection*>(self);
  auto it = c->streams_.find(stream_id);
  if (it == c->streams_.end()) return 0;
  Stream& stream = it->second;
  std::string& body = stream.request.body;
  if (stream.too_large || body.size() + len > c->bounds_.max_body_bytes) {
    stream.too_large = true;
    std::string().swap(body);
    return 0;
  }
  body.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int Http2Connection::OnFrameReceived(nghttp2_session*, const nghttp2_frame* frame, void* self) {
  const bool request_frame = frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA;
  if (request_frame && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
    static_cast<Http2Connection*>(self)->Dispatch(frame->hd.stream_id);
  return 0;
}

int Http2Connection::OnFrameSent(nghttp2_session* session, const nghttp2_frame* frame, void* self) {
  const bool response_frame = frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA;
  if (!response_frame || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  auto* c = static_cast<Http2Connection*>(self);
  auto it = c->streams_.find(frame->hd.stream_id);
  if (it == c->streams_.end()) return 0;
  it->second.deadline = Clock::time_point::max();  // all of it written: the connection's deadline covers it
  // Answered before the request was whole (408): the rest of it is not wanted.
  if (!it->second.request_whole)
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
  return 0;
}

int Http2Connection::OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* self) {
  static_cast<Http2Connection*>(self)->streams_.erase(stream_id);
  return 0;
}

ssize_t Http2Connection::ReadBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source*, void* self) {
  auto* c = static_cast<Http2Connection*>(self);
  auto it = c->streams_.find(stream_id);
  if (it == c->streams_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  Stream& stream = it->second;
  const size_t n = std::min(length, stream.body.size() - stream.body_sent);
  std::copy_n(stream.body.data() + stream.body_sent, n, buf);
  stream.body_sent += n;
  if (stream.body_sent == stream.body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

}  // namespace mgpu
