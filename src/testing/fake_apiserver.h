// An in-process Kubernetes API server for tests: real HTTP(S) on 127.0.0.1 at the real REST paths.
// Contract:
//  - Stores nodes, pods, events, leases, replicasets, deployments, statefulsets, daemonsets, jobs,
//  resourceslices, resourceclaims and resourceclaimtemplates as JSON, with
//    one global resourceVersion counter (like etcd). Create/replace/merge-patch/JSON-patch/delete over HTTP
//    or through the C++ calls below, with the API server's semantics: 409 AlreadyExists, 409 Conflict on a
//    stale resourceVersion (also one inside a merge patch), 404 NotFound, each failure answered with a Status
//    object.
//  - Lists honour labelSelector and fieldSelector (=, ==, !=, in, notin, exists, !exists); watches stream
//    ADDED/MODIFIED/DELETED (selector-aware: an object leaving the selection is DELETED) and BOOKMARKs, from
//    a resourceVersion in the kept history (else an ERROR 410 event), and end cleanly after timeoutSeconds.
//  - POST .../pods/{name}/binding sets spec.nodeName (409 when already bound or the uid differs), answers
//  201.
//  - Discovery (/api, /apis, /api/v1, /apis/<g>/<v>, /version) is served so kubectl can read from it.
//  - Optional TLS (with required client certificates) and bearer-token checking.
//  - Faults injected by the test apply to the next matching requests; DropWatches and Compact act at once.
//  - Thread-safe; Stop() (and the destructor) ends every open watch and joins the server thread.
// What it still exists for, now that tests/realcluster/ runs the real kube-apiserver v1.36.2: faults on
// demand (a 409 or a 500 on the next request, dropped watches, compaction, slow answers) that a real API
// server gives only by chance, thousands of objects in milliseconds for the unit, integration and benchmark
// runs, and a server in the same process so that every daemon's test runs on any machine, without the
// Kubernetes binaries.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace mgpu::testing {

using Json = nlohmann::json;

struct FakeApiServerOptions {
  bool tls = false;
  std::string cert_file{};  // server certificate and key (PEM), when tls
  std::string key_file{};
  std::string client_ca_file{};  // when set (tls), clients must present a certificate signed by this CA
  std::string token{};           // when set, every request needs "Authorization: Bearer <token>"
  std::chrono::milliseconds bookmark_interval{200};  // for watches that allow bookmarks
  size_t history_limit = 100000;                     // watch events kept; older versions answer 410
};

// A misbehaviour applied to the next `times` requests that match method, path prefix and watch-ness.
struct Fault {
  enum class Action {
    kStatus,        // answer `status` with a Status body (Retry-After: retry_after_seconds for 429)
    kDelay,         // wait `delay`, then answer normally
    kTruncateBody,  // cut the body off halfway (a watch: after `events_before_drop` events, in mid-line)
    kDropWatch,     // a watch: close the connection abruptly after `events_before_drop` events
  };
  Action action = Action::kStatus;
  std::string method{};         // "" matches any
  std::string path_prefix{};    // "" matches any
  std::optional<bool> watch{};  // true: only watches; false: only non-watch requests
  std::string with_param{};     // "" matches any; else only requests carrying this query parameter
  int status = 500;
  int retry_after_seconds = 0;
  std::chrono::milliseconds delay{0};
  int events_before_drop = 0;
  int times = 1;  // -1: forever
};

struct RecordedRequest {
  std::string method{};
  std::string path{};
  std::map<std::string, std::string> params{};
  bool watch = false;
  std::string authorization{};
};

class FakeApiServer {
 public:
  explicit FakeApiServer(FakeApiServerOptions options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Listens on 127.0.0.1 at a free port and serves on a background thread.
  Status Start();
  void Stop();
  int port() const { return port_; }
  std::string url() const;  // "http(s)://127.0.0.1:<port>"
  // A kubeconfig naming this server (and its token), for kubectl and kubectl-mgpu; with TLS it skips
  // verification, so it suits servers without client certificates.
  std::string KubeconfigYaml() const;

  // The store. `resource` is the plural ("pods", "nodes", "leases", "replicasets", ...); the namespace comes
  // from metadata.namespace ("default" when unset) for namespaced kinds. Results are the stored objects.
  Result<Json> Create(const std::string& resource, Json object);
  Result<Json> Update(const std::string& resource,
                      Json object);  // conditional when it carries a resourceVersion
  Result<Json> MergePatch(const std::string& resource, const std::string& ns, const std::string& name,
                          const Json& patch);
  Status Delete(const std::string& resource, const std::string& ns, const std::string& name);
  std::optional<Json> Get(const std::string& resource, const std::string& ns, const std::string& name) const;
  std::vector<Json> List(const std::string& resource, const std::string& ns = "") const;
  int64_t resource_version() const;

  // Faults and observation.
  void InjectFault(Fault fault);
  void ClearFaults();
  void DropWatches();  // cuts every open watch stream now, without the closing chunk
  void Compact();      // forgets the watch history and list continue tokens: both get 410 Gone
  void SetToken(std::string token);
  // Malformed data for robustness tests: a raw line sent to every watch of `resource` (bumping the version),
  // and an object stored as is (no validation, no event) under `key`, so that lists return it.
  void SendRawWatchLine(const std::string& resource, const std::string& line);
  void StoreRaw(const std::string& resource, const std::string& key, Json object);
  int open_watches() const;
  int pending_faults() const;  // injected faults not yet used up
  std::vector<RecordedRequest> requests() const;

  // Internal: what an HTTP or C++ call produced (status code and body). Public for the implementation's
  // helpers.
  struct Outcome {
    int code;
    Json body;
  };

 private:
  struct Event {
    int64_t rv;
    std::string resource;
    std::string type;  // ADDED, MODIFIED, DELETED, or RAW (object is then the line to send as is)
    Json object;
    Json old_object;  // the previous state for MODIFIED, for selector transitions
  };
  struct Watch;

  struct Route;

  // One HTTP request: Admit (record it, check the token), ApplyFault (an injected fault's answer or effect),
  // Resolve (discovery answers, else the resource it names), then a watch or ServeLocked's verb.
  void Handle(const httplib::Request& req, httplib::Response& res);
  std::optional<Outcome> Admit(const httplib::Request& req, bool watch, uint64_t& generation);
  std::optional<Outcome> ApplyFault(const httplib::Request& req, httplib::Response& res, bool watch,
                                    int& drop_after, bool& truncate);
  static std::optional<Outcome> Resolve(const std::string& path, const std::string& method, Route& route);
  Outcome ServeLocked(const httplib::Request& req, const Route& route, const Json& body);
  Outcome GetLocked(const Route& route);
  void ServeWatch(const std::string& resource, const std::string& ns, const httplib::Request& req,
                  httplib::Response& res, uint64_t generation, int drop_after, bool truncate);
  std::optional<Fault> TakeFault(const httplib::Request& req, bool watch);
  bool WaitWhileRunning(std::chrono::milliseconds delay);

  Outcome CreateLocked(const std::string& resource, const std::string& ns, Json object);
  Outcome UpdateLocked(const std::string& resource, const std::string& ns, const std::string& name,
                       Json object);
  Outcome PatchLocked(const std::string& resource, const std::string& ns, const std::string& name,
                      const Json& patch, const std::string& content_type);
  Outcome DeleteLocked(const std::string& resource, const std::string& ns, const std::string& name);
  Outcome BindLocked(const std::string& ns, const std::string& name, const Json& binding);
  // `limit` and `continue_token` as the query gives them ("" when absent).
  Outcome ListLocked(const std::string& resource, const std::string& ns, const std::string& label_selector,
                     const std::string& field_selector, const std::string& limit,
                     const std::string& continue_token);
  void RecordLocked(const std::string& resource, const std::string& type, const Json& object,
                    Json old_object);

  const FakeApiServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled on every store change, drop, compaction and stop
  bool stopping_ = false;
  std::string token_;
  int64_t rv_ = 1;            // like etcd, never 0: a list's version must be usable to start a watch from
  int64_t compacted_rv_ = 0;  // watches must start at or after this version
  uint64_t drop_generation_ = 0;
  int open_watches_ = 0;
  std::map<std::string, std::map<std::string, Json>> objects_;  // resource -> "ns/name" -> object
  std::deque<Event> history_;
  // Paginated lists: per continue token, the version the list was taken at and the items not yet sent
  // (a consistent snapshot, as the real server gives). Compact() expires them.
  std::map<std::string, std::pair<int64_t, std::vector<Json>>> pages_;
  uint64_t next_page_ = 0;
  std::vector<Fault> faults_;
  std::vector<RecordedRequest> requests_;
};

}  // namespace mgpu::testing
