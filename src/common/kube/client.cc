#include "common/kube/client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/file.h"
#include "common/json_depth.h"
#include "common/kube/exec_credential.h"

namespace mgpu::kube {

const ApiResource kNodes{"/api/v1", "nodes", "Node", false};
const ApiResource kPods{"/api/v1", "pods", "Pod", true};
const ApiResource kEvents{"/api/v1", "events", "Event", true};
const ApiResource kLeases{"/apis/coordination.k8s.io/v1", "leases", "Lease", true};
const ApiResource kReplicaSets{"/apis/apps/v1", "replicasets", "ReplicaSet", true};
const ApiResource kDeployments{"/apis/apps/v1", "deployments", "Deployment", true};
const ApiResource kStatefulSets{"/apis/apps/v1", "statefulsets", "StatefulSet", true};
const ApiResource kDaemonSets{"/apis/apps/v1", "daemonsets", "DaemonSet", true};
const ApiResource kJobs{"/apis/batch/v1", "jobs", "Job", true};
const ApiResource kResourceSlices{"/apis/resource.k8s.io/v1", "resourceslices", "ResourceSlice", false};
const ApiResource kResourceClaims{"/apis/resource.k8s.io/v1", "resourceclaims", "ResourceClaim", true};
const ApiResource kResourceClaimTemplates{"/apis/resource.k8s.io/v1", "resourceclaimtemplates",
                                          "ResourceClaimTemplate", true};

namespace {

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

void AddQuery(std::string& path, std::string_view key, std::string_view value) {
  path += path.find('?') == std::string::npos ? '?' : '&';
  path += key;
  path += '=';
  path += UrlEncode(value);
}

void AddSelectors(std::string& path, const ListOptions& options) {
  if (!options.label_selector.empty()) AddQuery(path, "labelSelector", options.label_selector);
  if (!options.field_selector.empty()) AddQuery(path, "fieldSelector", options.field_selector);
}

// The API server's Status.reason and message from an error body, or a snippet of a body that is not a Status.
std::pair<std::string, std::string> StatusOf(const std::string& body) {
  Json status = JsonDepthWithin(body) ? Json::parse(body, nullptr, false) : Json();
  if (status.is_object() && status.value("kind", "") == "Status") {
    auto text = [&](const char* key) {
      auto it = status.find(key);
      return it != status.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    return {text("reason"), text("message")};
  }
  std::string snippet = body.substr(0, 200);
  for (char& c : snippet) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return {"", snippet};
}

std::string DescribeFailure(std::string_view method, const std::string& path, int http_status,
                            const std::string& detail) {
  std::string text = std::string(method) + " " + path.substr(0, path.find('?')) + " failed";
  if (http_status != 0) text += " with HTTP " + std::to_string(http_status);
  if (!detail.empty()) text += ": " + detail;
  return text;
}

size_t AppendToString(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t CaptureRetryAfter(char* data, size_t size, size_t count, void* user) {
  std::string_view line(data, size * count);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    std::string lower(line.substr(0, kName.size()));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == kName) {
      std::string value(line.substr(kName.size()));
      *static_cast<std::optional<int>*>(user) = std::atoi(value.c_str());
    }
  }
  return size * count;
}

// curl's progress callback, called at least once a second: a non-zero answer aborts the transfer.
int AbortWhenCancelled(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const CancelToken*>(cancel)->cancelled() ? 1 : 0;
}

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// State of one running watch, fed by curl's write callback.
struct WatchStream {
  CURL* easy = nullptr;
  const ApiResource* resource = nullptr;
  const std::function<bool(WatchEvent)>* on_event = nullptr;
  std::string buffer;
  std::string error_body;
  bool stopped = false;
  bool too_long = false;  // a line passed kMaxWatchLineBytes
  std::chrono::steady_clock::time_point last_data;

  void Line(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || stopped) return;
    std::optional<WatchEvent> event = ParseWatchLine(line);
    if (!event) {
      spdlog::warn("kube: skipping a malformed watch event kind={} line={}", resource->kind,
                   std::string(line.substr(0, 120)));
      return;
    }
    if (!(*on_event)(std::move(*event))) stopped = true;
  }

  static size_t Write(char* data, size_t size, size_t count, void* user) {
    auto* self = static_cast<WatchStream*>(user);
    size_t n = size * count;
    self->last_data = std::chrono::steady_clock::now();
    long status = 0;
    curl_easy_getinfo(self->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
      if (self->error_body.size() < 65536) self->error_body.append(data, n);
      return n;
    }
    // Only the new bytes can hold a newline: rescanning the whole buffer would be quadratic in a long line.
    const size_t unscanned = self->buffer.size();
    self->buffer.append(data, n);
    size_t start = 0;
    for (size_t newline = self->buffer.find('\n', unscanned); newline != std::string::npos;
         newline = self->buffer.find('\n', start)) {
      self->Line(std::string_view(self->buffer).substr(start, newline - start));
      start = newline + 1;
    }
    self->buffer.erase(0, start);
    if (self->buffer.size() > kMaxWatchLineBytes) {
      self->too_long = true;
      return 0;  // curl ends the transfer
    }
    return n;
  }
};

}  // namespace

std::optional<WatchEvent> ParseWatchLine(std::string_view line) {
  if (!JsonDepthWithin(line)) return std::nullopt;
  Json event = Json::parse(line, nullptr, false);
  if (!event.is_object()) return std::nullopt;
  auto type = event.find("type");
  auto object = event.find("object");
  if (type == event.end() || !type->is_string() || object == event.end() || !object->is_object())
    return std::nullopt;
  return WatchEvent{type->get<std::string>(), std::move(*object)};
}

std::optional<ApiResource> ResourceForKind(std::string_view api_version, std::string_view kind) {
  for (const ApiResource* r : {&kNodes, &kPods, &kEvents, &kLeases, &kReplicaSets, &kDeployments,
                               &kStatefulSets, &kDaemonSets, &kJobs}) {
    std::string_view prefix = r->api_prefix;
    prefix.remove_prefix(
        prefix.starts_with("/apis/") ? 6 : 5);  // "/apis/apps/v1" -> "apps/v1", "/api/v1" -> "v1"
    if (r->kind == kind && prefix == api_version) return *r;
  }
  return std::nullopt;
}

std::string ResourcePath(const ApiResource& resource, std::string_view ns, std::string_view name,
                         std::string_view subresource) {
  std::string path = resource.api_prefix;
  if (resource.namespaced && !ns.empty()) path += "/namespaces/" + UrlEncode(ns);
  path += "/" + resource.plural;
  if (!name.empty()) path += "/" + UrlEncode(name);
  if (!subresource.empty()) path += "/" + std::string(subresource);
  return path;
}

ApiResult ApiResult::Failure(int http_status, std::string reason, std::string message) {
  ApiResult r;
  r.failed_ = true;
  r.http_status_ = http_status;
  r.reason_ = std::move(reason);
  r.message_ = std::move(message);
  return r;
}

Json MetadataPatch::ToJson() const {
  Json metadata = Json::object();
  auto fill = [](const std::map<std::string, std::optional<std::string>>& from) {
    Json out = Json::object();
    for (const auto& [key, value] : from) out[key] = value ? Json(*value) : Json(nullptr);
    return out;
  };
  if (!annotations.empty()) metadata["annotations"] = fill(annotations);
  if (!labels.empty()) metadata["labels"] = fill(labels);
  if (!resource_version.empty()) metadata["resourceVersion"] = resource_version;
  return Json{{"metadata", metadata}};
}

void CancelToken::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  if (multi_ != nullptr) curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

bool CancelToken::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

Result<std::unique_ptr<Client>> Client::Create(ClusterConfig config, ClientOptions options) {
  InitCurlOnce();
  if (!config.server.starts_with("https://") && !config.server.starts_with("http://")) {
    return Error{"API server address " + config.server + " is not an http:// or https:// URL"};
  }
  if (!config.tls_server_name.empty() && !config.server.starts_with("https://")) {
    return Error{"tls-server-name " + config.tls_server_name + " is set but API server address " +
                 config.server + " is not https://"};
  }
  for (const std::string* file : {&config.ca_file, &config.client_cert_file, &config.client_key_file}) {
    if (!file->empty() && !std::ifstream(*file)) return Error{"cannot read " + *file};
  }
  if (!config.token_file.empty() && !std::ifstream(config.token_file)) {
    return Error{"cannot read token file " + config.token_file};
  }
  return std::unique_ptr<Client>(new Client(std::move(config), std::move(options)));
}

Client::Client(ClusterConfig config, ClientOptions options)
    : config_(std::move(config)), options_(std::move(options)), base_url_(config_.server) {
  if (config_.tls_server_name.empty()) return;
  // Ask for https://<tls-server-name>:<port>/<path> (the name the certificate is checked against and sent
  // as SNI) and have curl connect to the configured host instead.
  const size_t start = std::string_view("https://").size();
  const size_t end = std::min(config_.server.find('/', start), config_.server.size());
  const std::string authority = config_.server.substr(start, end - start);
  const size_t colon = authority.rfind(':');
  const bool has_port = colon != std::string::npos && authority.find(']', colon) == std::string::npos;
  const std::string host = has_port ? authority.substr(0, colon) : authority;
  const std::string port = has_port ? authority.substr(colon + 1) : "443";
  base_url_ = "https://" + config_.tls_server_name + ":" + port + config_.server.substr(end);
  connect_to_ =
      curl_slist_append(nullptr, (config_.tls_server_name + ":" + port + ":" + host + ":" + port).c_str());
}

Client::~Client() {
  Close(handles_);
  Close(watches_);
  curl_slist_free_all(static_cast<curl_slist*>(connect_to_));
}

Client::KeptHandle Client::AcquireHandle() {
  {
    std::unique_lock lock(mu_);
    ++waiting_;
    released_.wait(lock, [&] { return in_use_ < kMaxHandles; });
    --waiting_;
    ++in_use_;
    if (!handles_.empty()) {
      auto first =
          std::min_element(handles_.begin(), handles_.end(),
                           [](const KeptHandle& a, const KeptHandle& b) { return a.opened < b.opened; });
      KeptHandle kept = *first;
      handles_.erase(first);  // the others stay in the order they were released
      return kept;
    }
  }
  KeptHandle made{.handle = curl_easy_init()};
  std::lock_guard lock(mu_);
  if (made.handle == nullptr) {
    --in_use_;
    released_.notify_one();
  } else {
    made.opened = ++opened_;
  }
  return made;
}

std::vector<Client::KeptHandle> Client::TakeIdleLocked(std::chrono::steady_clock::time_point now) {
  std::vector<KeptHandle> idle;
  for (std::vector<KeptHandle>* kept : {&handles_, &watches_}) {
    const auto fresh = std::find_if(kept->begin(), kept->end(), [&](const KeptHandle& handle) {
      return now - handle.since < options_.idle_connection_timeout;
    });
    idle.insert(idle.end(), kept->begin(), fresh);
    kept->erase(kept->begin(), fresh);
  }
  return idle;
}

size_t Client::Close(const std::vector<KeptHandle>& kept) {
  for (const KeptHandle& handle : kept) {
    curl_easy_cleanup(static_cast<CURL*>(handle.handle));
    if (handle.multi != nullptr) curl_multi_cleanup(static_cast<CURLM*>(handle.multi));  // and its connection
  }
  closed_ += kept.size();
  return kept.size();
}

void Client::ReleaseHandle(KeptHandle held) {
  curl_easy_reset(static_cast<CURL*>(held.handle));  // keeps the handle's open connections for reuse
  std::vector<KeptHandle> close;
  {
    std::lock_guard lock(mu_);
    held.since = std::chrono::steady_clock::now();
    close = TakeIdleLocked(held.since);
    handles_.push_back(held);
    --in_use_;
  }
  released_.notify_one();
  Close(close);
}

size_t Client::IdleHandles() {
  std::lock_guard lock(mu_);
  return handles_.size();
}

size_t Client::IdleWatchHandles() {
  std::lock_guard lock(mu_);
  return watches_.size();
}

size_t Client::WaitingForHandle() {
  std::lock_guard lock(mu_);
  return waiting_;
}

size_t Client::CloseIdleHandles() {
  std::vector<KeptHandle> close;
  {
    std::lock_guard lock(mu_);
    close = TakeIdleLocked(std::chrono::steady_clock::now());
  }
  return Close(close);
}

Status Client::RefreshExecCredential(bool force) {
  if (!config_.exec) return Status::Ok();
  std::lock_guard lock(exec_mu_);
  {
    std::lock_guard state(mu_);
    const bool expired = exec_expires_ && std::chrono::system_clock::now() >= *exec_expires_;
    const bool have = !token_.empty() || !exec_cert_.empty();  // a run always gives one of them
    if (have && !expired && !force) return Status::Ok();
  }
  Result<ExecCredential> credential = RunExecPlugin(*config_.exec);
  if (!credential) {
    spdlog::warn("kube: {}", credential.message());
    return Error{credential.message()};
  }
  spdlog::debug("kube: credential plugin {} gave a {}{}", config_.exec->command,
                credential->token.empty() ? "client certificate" : "token",
                credential->expires ? "" : " without expiry");
  std::lock_guard state(mu_);
  token_ = credential->token;
  exec_cert_ = credential->client_cert_pem;
  exec_key_ = credential->client_key_pem;
  exec_expires_ = credential->expires;
  return Status::Ok();
}

std::string Client::CurrentToken(bool force_reread) {
  std::lock_guard lock(mu_);
  if (config_.exec) return token_;  // RefreshExecCredential keeps it
  if (config_.token_file.empty()) return config_.token;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(config_.token_file, ec);
  auto size = std::filesystem::file_size(config_.token_file, ec);
  if (ec) return token_;  // keep the last good token while the file is being replaced
  if (force_reread || !token_mtime_ || *token_mtime_ != mtime || token_size_ != size) {
    Result<std::string> read = ReadFile(config_.token_file);
    std::string token = read.ok() ? std::move(*read) : std::string();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (!token.empty()) {
      token_ = std::move(token);
      token_mtime_ = mtime;
      token_size_ = size;
    }
  }
  return token_;
}

void* Client::Prepare(void* handle, const std::string& path, bool force_token_reread) {
  CURL* curl = static_cast<CURL*>(handle);
  std::string url = base_url_ + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (connect_to_ != nullptr) curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to_);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  auto blob = [&](CURLoption option, const std::string& data) {
    curl_blob b{const_cast<char*>(data.data()), data.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, option, &b);
  };
  if (!config_.ca_data.empty()) blob(CURLOPT_CAINFO_BLOB, config_.ca_data);
  if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());
  if (!config_.client_cert_data.empty()) blob(CURLOPT_SSLCERT_BLOB, config_.client_cert_data);
  if (!config_.client_cert_file.empty())
    curl_easy_setopt(curl, CURLOPT_SSLCERT, config_.client_cert_file.c_str());
  if (!config_.client_key_data.empty()) blob(CURLOPT_SSLKEY_BLOB, config_.client_key_data);
  if (!config_.client_key_file.empty())
    curl_easy_setopt(curl, CURLOPT_SSLKEY, config_.client_key_file.c_str());
  if (config_.exec) {
    std::lock_guard lock(mu_);
    if (!exec_cert_.empty()) blob(CURLOPT_SSLCERT_BLOB, exec_cert_);
    if (!exec_key_.empty()) blob(CURLOPT_SSLKEY_BLOB, exec_key_);
  }
  if (config_.insecure_skip_tls_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, "Expect:");
  std::string token = CurrentToken(force_token_reread);
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  return headers;
}

ApiResult Client::Request(std::string_view method, const std::string& path, const std::string* body,
                          std::string_view content_type, const CancelToken* cancel) {
  bool reread_token = false;
  for (int attempt = 0;; ++attempt) {
    if (Status s = RefreshExecCredential(reread_token); !s)
      return ApiResult::Failure(0, "", DescribeFailure(method, path, 0, s.message()));
    KeptHandle held = AcquireHandle();
    CURL* curl = static_cast<CURL*>(held.handle);
    if (curl == nullptr)
      return ApiResult::Failure(0, "", DescribeFailure(method, path, 0, "curl_easy_init failed"));
    auto* headers = static_cast<curl_slist*>(Prepare(curl, path, reread_token));
    if (body != nullptr)
      headers = curl_slist_append(headers, ("Content-Type: " + std::string(content_type)).c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");  // large lists come compressed; watches stay plain
    std::string method_text(method);
    if (method == "GET") {
      curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method_text.c_str());
    }
    if (body != nullptr) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    }
    std::string response;
    std::optional<int> retry_after;
    char curl_error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendToString);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, CaptureRetryAfter);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &retry_after);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    if (cancel != nullptr) {
      curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, AbortWhenCancelled);
      curl_easy_setopt(curl, CURLOPT_XFERINFODATA, cancel);
    }
    CURLcode code = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
    curl_slist_free_all(headers);
    ReleaseHandle(held);

    if (code == CURLE_ABORTED_BY_CALLBACK) {
      return ApiResult::Failure(0, "Cancelled", DescribeFailure(method, path, 0, "cancelled"));
    }
    if (code != CURLE_OK) {
      std::string detail = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(code);
      return ApiResult::Failure(0, code == CURLE_OPERATION_TIMEDOUT ? "Timeout" : "",
                                DescribeFailure(method, path, 0, detail));
    }
    if (status == 429 && attempt < options_.max_throttle_retries) {
      auto wait = std::min<std::chrono::milliseconds>(
          std::chrono::seconds(std::max(retry_after.value_or(1), 0)), options_.max_retry_wait);
      spdlog::debug("kube: throttled on {} {}, retrying in {} ms", method, path, wait.count());
      std::this_thread::sleep_for(wait);
      continue;
    }
    if (status == 401 && (!config_.token_file.empty() || config_.exec) && !reread_token) {
      // The token may have rotated within the file's timestamp resolution, or the plugin's credential been
      // revoked before its expiry: read it (run it) again, once.
      reread_token = true;
      continue;
    }
    if (status < 200 || status >= 300) {
      auto [reason, message] = StatusOf(response);
      return ApiResult::Failure(static_cast<int>(status), reason,
                                DescribeFailure(method, path, status, message));
    }
    if (!JsonDepthWithin(response)) {
      return ApiResult::Failure(
          static_cast<int>(status), "",
          DescribeFailure(method, path, status,
                          "the answer nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"));
    }
    Json value = Json::parse(response, nullptr, false);
    if (value.is_discarded()) {
      return ApiResult::Failure(static_cast<int>(status), "",
                                DescribeFailure(method, path, status, "malformed JSON"));
    }
    return value;
  }
}

ApiResult Client::Get(const ApiResource& resource, std::string_view ns, std::string_view name) {
  return Request("GET", ResourcePath(resource, ns, name), nullptr, "");
}

ApiResult Client::List(const ApiResource& resource, std::string_view ns, const ListOptions& options,
                       const CancelToken* cancel) {
  std::string base = ResourcePath(resource, ns);
  AddSelectors(base, options);
  // Page by page (client-go's pager): the pages are one snapshot, at the first page's resourceVersion. When
  // the continue token expires midway (the server compacted), the whole list is asked for at once instead.
  Json items = Json::array();
  std::string next;
  bool paged = options_.list_page_size > 0 || options.at_most > 0;
  const int64_t page_size = options.at_most > 0 ? options.at_most : options_.list_page_size;
  for (;;) {
    std::string path = base;
    if (paged) AddQuery(path, "limit", std::to_string(page_size));
    if (!next.empty()) AddQuery(path, "continue", next);
    ApiResult page = Request("GET", path, nullptr, "", cancel);
    if (!page.ok() && page.IsGone() && !next.empty()) {
      spdlog::info("kube: continue token of the list of {} expired; listing it in one answer", base);
      items = Json::array();
      next.clear();
      paged = false;
      continue;
    }
    if (!page.ok()) return page;
    Json body = std::move(page).value();
    auto found = body.find("items");
    if (found == body.end() || !(found->is_array() || found->is_null())) {
      return ApiResult::Failure(200, "", DescribeFailure("GET", path, 200, "the answer is not a list"));
    }
    if (found->is_array()) {
      for (Json& item : *found) items.push_back(std::move(item));
    }
    next = StringAt(body, {"metadata", "continue"});
    if (next.empty() || !paged || options.at_most > 0) {
      body["items"] = std::move(items);
      if (auto m = body.find("metadata"); m != body.end() && m->is_object()) m->erase("continue");
      return body;
    }
  }
}

ApiResult Client::Create(const ApiResource& resource, std::string_view ns, const Json& object) {
  std::string body = object.dump();
  return Request("POST", ResourcePath(resource, ns), &body, "application/json");
}

ApiResult Client::Replace(const ApiResource& resource, std::string_view ns, std::string_view name,
                          const Json& object) {
  std::string body = object.dump();
  return Request("PUT", ResourcePath(resource, ns, name), &body, "application/json");
}

ApiResult Client::MergePatch(const ApiResource& resource, std::string_view ns, std::string_view name,
                             const Json& patch, std::string_view subresource) {
  std::string body = patch.dump();
  return Request("PATCH", ResourcePath(resource, ns, name, subresource), &body,
                 "application/merge-patch+json");
}

ApiResult Client::Delete(const ApiResource& resource, std::string_view ns, std::string_view name) {
  return Request("DELETE", ResourcePath(resource, ns, name), nullptr, "");
}

ApiResult Client::BindPod(std::string_view ns, std::string_view name, std::string_view uid,
                          std::string_view node, const std::map<std::string, std::string>& annotations) {
  Json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!uid.empty()) binding["metadata"]["uid"] = uid;
  if (!annotations.empty()) binding["metadata"]["annotations"] = annotations;
  std::string body = binding.dump();
  return Request("POST", ResourcePath(kPods, ns, name, "binding"), &body, "application/json");
}

ApiResult Client::RecordEvent(const Json& involved, std::string_view type, std::string_view reason,
                              std::string_view message, std::string_view component) {
  auto text = [&](const char* key, const char* fallback) {
    auto it = involved.is_object() ? involved.find(key) : involved.end();
    return it != involved.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
  };
  std::string name = MetadataString(involved, "name");
  std::string ns = MetadataString(involved, "namespace");
  Json ref = {{"apiVersion", text("apiVersion", "v1")},
              {"kind", text("kind", "")},
              {"name", name},
              {"namespace", ns},
              {"uid", MetadataString(involved, "uid")},
              {"resourceVersion", MetadataString(involved, "resourceVersion")}};
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects (nodes) live in "default"
  std::string now = Rfc3339(UnixNowNs());
  Json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", name + "."}, {"namespace", ns}}},
                {"involvedObject", ref},
                {"type", type},
                {"reason", reason},
                {"message", message},
                {"source", {{"component", component}}},
                {"reportingComponent", component},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  return Create(kEvents, ns, event);
}

ApiResult Client::UpdateLease(std::string_view ns, const Json& lease) {
  std::string name = MetadataString(lease, "name");
  if (name.empty()) return ApiResult::Failure(0, "Invalid", "cannot update a lease without metadata.name");
  return Replace(kLeases, ns, name, lease);
}

ApiResult Client::GetOwner(std::string_view ns, const Json& owner_reference) {
  auto text = [&](const char* key) {
    auto it = owner_reference.is_object() ? owner_reference.find(key) : owner_reference.end();
    return it != owner_reference.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string api_version = text("apiVersion");
  std::string kind = text("kind");
  std::string name = text("name");
  std::optional<ApiResource> resource = ResourceForKind(api_version, kind);
  if (!resource || name.empty()) {
    return ApiResult::Failure(0, "Unsupported", "cannot read an owner of kind " + api_version + "/" + kind);
  }
  return Get(*resource, ns, name);
}

ApiResult Client::Watch(const ApiResource& resource, std::string_view ns, const WatchOptions& options,
                        const std::function<bool(WatchEvent)>& on_event, CancelToken* cancel) {
  std::string path = ResourcePath(resource, ns);
  AddSelectors(path, options.selectors);
  AddQuery(path, "watch", "true");
  if (!options.resource_version.empty()) AddQuery(path, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks) AddQuery(path, "allowWatchBookmarks", "true");
  AddQuery(path, "timeoutSeconds", std::to_string(options.server_timeout.count()));

  if (Status s = RefreshExecCredential(false); !s)
    return ApiResult::Failure(0, "", DescribeFailure("GET", path, 0, s.message()));
  CURL* curl = nullptr;
  CURLM* multi = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!watches_.empty()) {
      curl = watches_.back().handle;
      multi = watches_.back().multi;
      watches_.pop_back();
    }
  }
  if (curl == nullptr) {
    curl = curl_easy_init();
    multi = curl_multi_init();
  }
  if (curl == nullptr || multi == nullptr) {
    if (curl != nullptr) curl_easy_cleanup(curl);
    if (multi != nullptr) curl_multi_cleanup(multi);
    return ApiResult::Failure(0, "", DescribeFailure("GET", path, 0, "curl initialisation failed"));
  }
  auto* headers = static_cast<curl_slist*>(Prepare(curl, path, false));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  WatchStream stream;
  stream.easy = curl;
  stream.resource = &resource;
  stream.on_event = &on_event;
  stream.last_data = std::chrono::steady_clock::now();
  char curl_error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WatchStream::Write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &stream);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
  curl_multi_add_handle(multi, curl);

  bool cancelled = false;
  if (cancel != nullptr) {
    std::lock_guard lock(cancel->mu_);
    cancelled = cancel->cancelled_;
    cancel->multi_ = multi;
  }
  bool idle = false;
  std::optional<CURLcode> done;
  while (!cancelled && !stream.stopped) {
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg == CURLMSG_DONE) done = msg->data.result;
    }
    if (done || running == 0 || stream.stopped) break;
    if (std::chrono::steady_clock::now() - stream.last_data > options.idle_timeout) {
      idle = true;
      break;
    }
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    cancelled = cancel != nullptr && cancel->cancelled();
  }
  if (cancel != nullptr) {
    std::lock_guard lock(cancel->mu_);
    cancel->multi_ = nullptr;
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_multi_remove_handle(multi, curl);  // its connection stays in `multi`
  curl_slist_free_all(headers);
  if (done && *done == CURLE_OK && status == 200 && !cancelled && !stream.stopped && !stream.too_long) {
    curl_easy_reset(curl);  // the server ended it: kept for the next watch
    std::lock_guard lock(mu_);
    watches_.push_back({.handle = curl, .since = std::chrono::steady_clock::now(), .multi = multi});
  } else {
    curl_easy_cleanup(curl);
    curl_multi_cleanup(multi);
  }

  if (cancelled || stream.stopped) return Json::object();
  if (idle) {
    return ApiResult::Failure(0, "Timeout", DescribeFailure("GET", path, 0, "the watch stream went silent"));
  }
  if (stream.too_long) {
    return ApiResult::Failure(
        0, "",
        DescribeFailure("GET", path, 0,
                        "a watch event is longer than " + std::to_string(kMaxWatchLineBytes >> 20) +
                            " MiB, the most mgpu reads"));
  }
  if (done && *done != CURLE_OK) {
    std::string detail = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(*done);
    return ApiResult::Failure(0, "", DescribeFailure("GET", path, 0, "watch stream broke: " + detail));
  }
  if (status != 200) {
    auto [reason, message] = StatusOf(stream.error_body);
    return ApiResult::Failure(static_cast<int>(status), reason,
                              DescribeFailure("GET", path, status, message));
  }
  if (!stream.buffer.empty()) {
    spdlog::warn("kube: watch of {} ended inside an event; {} bytes dropped", resource.kind,
                 stream.buffer.size());
  }
  return Json::object();
}

}  // namespace mgpu::kube
