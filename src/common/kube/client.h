// Kubernetes API client over libcurl: the only code in mgpu that speaks HTTP to the API server.
// Contract:
//  - Every call returns an ApiResult: the decoded JSON object, or an error sentence with the HTTP status (0
//  when no
//    answer came: connection, TLS or timeout) and the API server's Status.reason. Nothing throws.
//  - Each request is bounded by ClientOptions::request_timeout; 429 answers are retried after Retry-After.
//  - A Client is thread-safe; calls from many threads share a small pool of connections.
//  - Watch streams events on the calling thread until the server ends the stream, the handler says stop, or
//  the
//    CancelToken fires (which interrupts a blocked read at once).
//  - Objects are plain nlohmann::json as the API server sends them; callers parse what they need at their
//  edge.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_path.h"
#include "common/kube/kubeconfig.h"
#include "common/result.h"

namespace mgpu::kube {

using Json = nlohmann::json;

// A kind of object and where it lives in the REST tree.
struct ApiResource {
  std::string api_prefix{};  // "/api/v1" or "/apis/<group>/<version>"
  std::string plural{};      // "pods"
  std::string kind{};        // "Pod"
  bool namespaced = true;
};

extern const ApiResource kNodes;
extern const ApiResource kPods;
extern const ApiResource kEvents;
extern const ApiResource kLeases;  // coordination.k8s.io/v1
extern const ApiResource kReplicaSets;
extern const ApiResource kDeployments;
extern const ApiResource kStatefulSets;
extern const ApiResource kDaemonSets;
extern const ApiResource kJobs;                    // batch/v1
extern const ApiResource kResourceSlices;          // resource.k8s.io/v1 (DRA mode)
extern const ApiResource kResourceClaims;          // resource.k8s.io/v1
extern const ApiResource kResourceClaimTemplates;  // resource.k8s.io/v1

// The resource for an owner reference's apiVersion and kind (the workload kinds above), or nullopt.
std::optional<ApiResource> ResourceForKind(std::string_view api_version, std::string_view kind);

// "/api/v1/namespaces/<ns>/pods/<name>/<subresource>"; an empty namespace of a namespaced resource lists
// across all namespaces.
std::string ResourcePath(const ApiResource& resource, std::string_view ns, std::string_view name = "",
                         std::string_view subresource = "");

using ::mgpu::FindPath;  // common/json_path.h
using ::mgpu::MetadataString;
using ::mgpu::StringAt;

// The outcome of one API call.
class [[nodiscard]] ApiResult {
 public:
  ApiResult(Json value) : value_(std::move(value)) {}
  static ApiResult Failure(int http_status, std::string reason, std::string message);

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Json& value() const& { return value_; }
  Json&& value() && { return std::move(value_); }
  const Json* operator->() const { return &value_; }
  const Json& operator*() const { return value_; }

  Error error() const { return Error{message_}; }
  const std::string& message() const { return message_; }
  int http_status() const { return http_status_; }       // 0 when no HTTP answer came
  const std::string& reason() const { return reason_; }  // the Status.reason, e.g. "Conflict"
  bool IsNotFound() const { return failed_ && http_status_ == 404; }
  bool IsConflict() const { return failed_ && http_status_ == 409; }
  bool IsGone() const { return failed_ && http_status_ == 410; }

 private:
  ApiResult() = default;
  Json value_;
  bool failed_ = false;
  int http_status_ = 0;
  std::string reason_;
  std::string message_;
};

struct ListOptions {
  std::string label_selector{};  // "app=x,tier!=y"
  std::string field_selector{};  // "spec.nodeName=node-1"
  int64_t at_most = 0;  // > 0: one page of at most this many (whether a list is allowed), not the whole
};

// A JSON merge patch of metadata labels and annotations.
struct MetadataPatch {
  std::map<std::string, std::optional<std::string>> annotations{};  // nullopt removes the key
  std::map<std::string, std::optional<std::string>> labels{};
  std::string resource_version{};  // when set, the patch applies only to that version; otherwise 409 Conflict
  Json ToJson() const;
};

struct WatchOptions {
  ListOptions selectors{};
  std::string resource_version{};  // start after this version (usually the list's)
  bool allow_bookmarks = true;
  std::chrono::seconds server_timeout{300};  // the server ends the watch after this long
  // With no bytes at all for this long (not even a bookmark) the stream is presumed dead and fails.
  std::chrono::milliseconds idle_timeout{360000};
};

struct WatchEvent {
  std::string type{};  // ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (object is then a Status)
  Json object{};
};

// One line of a watch stream: {"type": string, "object": object}, else nullopt (the stream skips the line).
std::optional<WatchEvent> ParseWatchLine(std::string_view line);
// The longest watch line (one event) read; a stream sending a longer one fails with one sentence. Kubernetes
// objects are at most about 1.5 MiB (etcd's request limit).
inline constexpr size_t kMaxWatchLineBytes = size_t{16} << 20;

// Cancels a Watch or List from another thread: a blocked watch returns at once, a list within a second. Once
// cancelled it stays cancelled; one per calling thread.
class CancelToken {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class Client;
  mutable std::mutex mu_;
  bool cancelled_ = false;
  void* multi_ = nullptr;  // the running watch's CURLM, woken by Cancel
};

struct ClientOptions {
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  int max_throttle_retries = 5;                    // 429 answers retried this many times
  std::chrono::milliseconds max_retry_wait{5000};  // cap on one Retry-After wait
  std::string user_agent = "mgpu";
  int64_t list_page_size = 500;  // lists come in pages of this many items (`limit`/`continue`); 0: one answer
  // A kept connection unused this long is closed (client-go's IdleConnTimeout): what a burst opened goes
  // back once it is over.
  std::chrono::milliseconds idle_connection_timeout{90000};
};

class Client {
 public:
  // Checks the configuration (server URL, readable files) without contacting the server.
  static Result<std::unique_ptr<Client>> Create(ClusterConfig config, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClusterConfig& config() const { return config_; }

  // Generic verbs. `ns` is ignored for cluster-scoped resources.
  ApiResult Get(const ApiResource& resource, std::string_view ns, std::string_view name);
  ApiResult List(const ApiResource& resource, std::string_view ns, const ListOptions& options = {},
                 const CancelToken* cancel = nullptr);
  ApiResult Create(const ApiResource& resource, std::string_view ns, const Json& object);
  // PUT; a metadata.resourceVersion in `object` makes it conditional (409 Conflict when stale).
  ApiResult Replace(const ApiResource& resource, std::string_view ns, std::string_view name,
                    const Json& object);
  // A non-empty `subresource` patches it ("status").
  ApiResult MergePatch(const ApiResource& resource, std::string_view ns, std::string_view name,
                       const Json& patch, std::string_view subresource = "");
  ApiResult Delete(const ApiResource& resource, std::string_view ns, std::string_view name);
  // Streams events to `on_event` (return false to stop). Ok when the stream ended cleanly, was stopped or was
  // cancelled; an error when the server refused the watch or the stream broke. Malformed lines are logged and
  // skipped.
  ApiResult Watch(const ApiResource& resource, std::string_view ns, const WatchOptions& options,
                  const std::function<bool(WatchEvent)>& on_event, CancelToken* cancel = nullptr);

  // Typed calls the daemons need.
  ApiResult GetNode(std::string_view name) { return Get(kNodes, "", name); }
  ApiResult ListNodes(const ListOptions& options = {}) { return List(kNodes, "", options); }
  ApiResult PatchNodeMetadata(std::string_view name, const MetadataPatch& patch) {
    return MergePatch(kNodes, "", name, patch.ToJson());
  }
  ApiResult GetPod(std::string_view ns, std::string_view name) { return Get(kPods, ns, name); }
  // Empty `ns`: pods of all namespaces.
  ApiResult ListPods(std::string_view ns, const ListOptions& options = {}) {
    return List(kPods, ns, options);
  }
  ApiResult PatchPodMetadata(std::string_view ns, std::string_view name, const MetadataPatch& patch) {
    return MergePatch(kPods, ns, name, patch.ToJson());
  }
  // POSTs a Binding of the pod to `node`; a non-empty `uid` must match the pod's (409 otherwise). The API
  // server sets the Binding's `annotations` on the pod in the same update as spec.nodeName (pods/binding in
  // kube-apiserver's pod storage; tests/realcluster checks it against v1.36.2), so they arrive with the bind
  // or not at all.
  ApiResult BindPod(std::string_view ns, std::string_view name, std::string_view uid, std::string_view node,
                    const std::map<std::string, std::string>& annotations = {});
  // Creates a core/v1 Event about `involved` (a Pod or Node as read from the API). `type` is Normal or
  // Warning.
  ApiResult RecordEvent(const Json& involved, std::string_view type, std::string_view reason,
                        std::string_view message, std::string_view component);
  ApiResult GetLease(std::string_view ns, std::string_view name) { return Get(kLeases, ns, name); }
  ApiResult CreateLease(std::string_view ns, const Json& lease) { return Create(kLeases, ns, lease); }
  // Conditional on the lease's metadata.resourceVersion.
  ApiResult UpdateLease(std::string_view ns, const Json& lease);
  // The controller named by an owner reference (ReplicaSet, Deployment, StatefulSet, DaemonSet, Job).
  ApiResult GetOwner(std::string_view ns, const Json& owner_reference);

  // Each request holds a handle (its open connection to the API server, its TLS state and buffers), at most
  // kMaxHandles at once: a request beyond them waits for one to be released. Released handles are kept for
  // the next requests, which take the one opened first: after a burst the connections it opened are the
  // ones left idle and closed, and the one kept (the leader's renewals) keeps the TLS state made while the
  // client was quiet, not amid the burst's freed memory, whose pages it would keep resident. Without the
  // bound on idle handles the pool kept as many as were ever in use at once (98 connections in the extender
  // after a real kube-scheduler's burst of binds, about 8 MB of heap); with that bound alone, a burst past it
  // opened a connection, and the API server a TLS handshake, for each request beyond the kept ones (~500 per
  // 2,000 binds once kube-scheduler's binds came over HTTP/2, the API server's CPU per pod up by a quarter:
  // bench/RESULTS.md section 5). client-go keeps 25 idle connections per host (and multiplexes its requests
  // over HTTP/2).
  static constexpr size_t kMaxHandles = 25;
  // Handles kept for the next requests, and requests waiting for a handle (tests).
  size_t IdleHandles();
  size_t WaitingForHandle();
  // Closes the kept handles unused for idle_connection_timeout; returns how many. Releasing a handle does it
  // too; a daemon whose client may fall silent after a burst calls it now and then.
  size_t CloseIdleHandles();
  // The kept handles closed so far for being idle, by either: a daemon that hands freed memory back once a
  // burst is over counts these closes among its ends (each frees a connection's TLS state and buffers).
  uint64_t ClosedHandles() const { return closed_.load(); }
  // A watch the server ended on its timeout leaves its handle, with the connection, for the next watch (an
  // informer resumes at once): without it each informer opened a connection, and made its TLS state anew,
  // every server_timeout, in whatever burst was then going on, whose freed memory that state then kept
  // resident for the connection's life (bench/RESULTS.md section 5). Kept ones are closed as idle request
  // handles are, and counted with them.
  size_t IdleWatchHandles();

 private:
  Client(ClusterConfig config, ClientOptions options);
  ApiResult Request(std::string_view method, const std::string& path, const std::string* body,
                    std::string_view content_type, const CancelToken* cancel = nullptr);
  struct KeptHandle;
  // A handle for one request, a kept one or a new one (`handle` null when curl could not make one), and its
  // return.
  KeptHandle AcquireHandle();
  void ReleaseHandle(KeptHandle held);
  // Sets URL, TLS, auth and common headers on a reset handle; returns the header list to free after the call.
  void* Prepare(void* handle, const std::string& path, bool force_token_reread);
  std::string CurrentToken(bool force_reread);
  // With an exec plugin: runs it when there is no credential yet, it expired, or `force`.
  Status RefreshExecCredential(bool force);

  ClusterConfig config_;
  ClientOptions options_;
  std::string base_url_;  // config_.server; with tls-server-name, that name in place of the host
  void* connect_to_ =
      nullptr;          // curl_slist: with tls-server-name, "name:port:host:port" (connect to the host)
  std::mutex mu_;       // guards handles_, watches_, in_use_, waiting_ and the token cache
  std::mutex exec_mu_;  // one exec plugin run at a time
  struct KeptHandle {
    void* handle = nullptr;
    std::chrono::steady_clock::time_point since{};  // released then
    void* multi = nullptr;                          // a watch's: the curl multi handle holding its connection
    uint64_t opened = 0;                            // a request's: its place in the order they were made
  };
  std::vector<KeptHandle> handles_;  // the most recently released last
  std::vector<KeptHandle> watches_;  // watches' handles, the same way
  size_t in_use_ = 0;                // handles held by requests
  uint64_t opened_ = 0;              // request handles made so far
  size_t waiting_ = 0;               // requests waiting for one
  std::atomic<uint64_t> closed_{0};  // ClosedHandles
  std::condition_variable released_;
  // Takes the handles unused for idle_connection_timeout out of handles_ and watches_ (under mu_), to be
  // closed outside it (Close).
  std::vector<KeptHandle> TakeIdleLocked(std::chrono::steady_clock::time_point now);
  // Closes kept handles and their connections, counting them in closed_; returns how many.
  size_t Close(const std::vector<KeptHandle>& kept);
  std::string token_;
  std::string exec_cert_, exec_key_;  // PEM, from the exec plugin
  std::optional<std::chrono::system_clock::time_point> exec_expires_;
  std::optional<std::filesystem::file_time_type> token_mtime_;
  std::uintmax_t token_size_ = 0;
};

}  // namespace mgpu::kube
