#include "testing/fake_apiserver.h"

#include <httplib.h>

#include "common/clock.h"
#include "common/kube/client.h"

#include <algorithm>
#include <ctime>
#include <random>
#include <string_view>

namespace mgpu::testing {
namespace {

using Outcome = FakeApiServer::Outcome;

struct KindInfo {
  const char* group_version;
  const char* plural;
  const char* kind;
  bool namespaced;
};

constexpr KindInfo kKinds[] = {
    {"v1", "nodes", "Node", false},
    {"v1", "pods", "Pod", true},
    {"v1", "events", "Event", true},
    {"coordination.k8s.io/v1", "leases", "Lease", true},
    {"apps/v1", "replicasets", "ReplicaSet", true},
    {"apps/v1", "deployments", "Deployment", true},
    {"apps/v1", "statefulsets", "StatefulSet", true},
    {"apps/v1", "daemonsets", "DaemonSet", true},
    {"batch/v1", "jobs", "Job", true},
    {"resource.k8s.io/v1", "resourceslices", "ResourceSlice", false},
    {"resource.k8s.io/v1", "resourceclaims", "ResourceClaim", true},
    {"resource.k8s.io/v1", "resourceclaimtemplates", "ResourceClaimTemplate", true},
};

const KindInfo* FindKind(std::string_view plural) {
  for (const KindInfo& k : kKinds) {
    if (plural == k.plural) return &k;
  }
  return nullptr;
}

std::string Key(const std::string& ns, const std::string& name) { return ns + "/" + name; }

Json StatusJson(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", Json::object()},
          {"status", code < 300 ? "Success" : "Failure"},
          {"message", message},
          {"reason", reason},
          {"code", code}};
}

Outcome Fail(int code, const std::string& reason, const std::string& message) {
  return {code, StatusJson(code, reason, message)};
}

Outcome NotFound(const KindInfo& kind, const std::string& name) {
  return Fail(404, "NotFound", std::string(kind.plural) + " \"" + name + "\" not found");
}

Outcome Conflict(const KindInfo& kind, const std::string& name) {
  return Fail(
      409, "Conflict",
      std::string("Operation cannot be fulfilled on ") + kind.plural + " \"" + name +
          "\": the object has been modified; please apply your changes to the latest version and try again");
}

std::string RandomHex(size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::lock_guard lock(mu);
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(kHex[rng() % 16]);
  return out;
}

std::string NewUid() {
  std::string h = RandomHex(32);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
         h.substr(20);
}

// --- Selectors
// -------------------------------------------------------------------------------------------------

struct Requirement {
  enum class Op { kEq, kNe, kIn, kNotIn, kExists, kNotExists };
  std::string key;
  Op op;
  std::vector<std::string> values;
};

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::optional<std::vector<Requirement>> ParseSelector(std::string_view text, bool field) {
  std::vector<std::string> terms;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      terms.push_back(Trim(current));
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (!Trim(current).empty() || !terms.empty()) terms.push_back(Trim(current));
  std::vector<Requirement> out;
  for (const std::string& term : terms) {
    if (term.empty()) return std::nullopt;
    Requirement r;
    if (size_t paren = term.find('('); paren != std::string::npos && !field) {
      if (term.back() != ')') return std::nullopt;
      std::string head = Trim(std::string_view(term).substr(0, paren));
      size_t space = head.find_last_of(" \t");
      if (space == std::string::npos) return std::nullopt;
      std::string op = Trim(std::string_view(head).substr(space + 1));
      r.key = Trim(std::string_view(head).substr(0, space));
      if (op == "in")
        r.op = Requirement::Op::kIn;
      else if (op == "notin")
        r.op = Requirement::Op::kNotIn;
      else
        return std::nullopt;
      std::string inner = term.substr(paren + 1, term.size() - paren - 2);
      size_t start = 0;
      while (true) {
        size_t comma = inner.find(',', start);
        r.values.push_back(Trim(std::string_view(inner).substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (size_t ne = term.find("!="); ne != std::string::npos) {
      r.key = Trim(std::string_view(term).substr(0, ne));
      r.op = Requirement::Op::kNe;
      r.values.push_back(Trim(std::string_view(term).substr(ne + 2)));
    } else if (size_t eq = term.find('='); eq != std::string::npos) {
      r.key = Trim(std::string_view(term).substr(0, eq));
      r.op = Requirement::Op::kEq;
      size_t value_start = term.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1;
      r.values.push_back(Trim(std::string_view(term).substr(value_start)));
    } else if (!field && term.front() == '!') {
      r.key = Trim(std::string_view(term).substr(1));
      r.op = Requirement::Op::kNotExists;
    } else if (!field) {
      r.key = term;
      r.op = Requirement::Op::kExists;
    } else {
      return std::nullopt;
    }
    if (r.key.empty()) return std::nullopt;
    out.push_back(std::move(r));
  }
  return out;
}

// The value of a dotted field path as a string; "" when missing.
std::optional<std::string> FieldValue(const Json& object, const std::string& path) {
  const Json* at = &object;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!at->is_object()) return std::nullopt;
    auto it = at->find(part);
    if (it == at->end()) return std::nullopt;
    at = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (at->is_string()) return at->get<std::string>();
  if (at->is_null()) return std::nullopt;
  return at->dump();
}

bool Matches(const Json& object, const std::vector<Requirement>& labels,
             const std::vector<Requirement>& fields) {
  for (const Requirement& r : labels) {
    std::optional<std::string> value;
    const Json* map = nullptr;
    if (object.contains("metadata") && object["metadata"].is_object() &&
        object["metadata"].contains("labels") && object["metadata"]["labels"].is_object()) {
      map = &object["metadata"]["labels"];
    }
    if (map != nullptr) {
      auto it = map->find(r.key);
      if (it != map->end() && it->is_string()) value = it->get<std::string>();
    }
    bool in = value && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
    switch (r.op) {
      case Requirement::Op::kEq:
      case Requirement::Op::kIn:
        if (!in) return false;
        break;
      case Requirement::Op::kNe:
      case Requirement::Op::kNotIn:
        if (in) return false;
        break;
      case Requirement::Op::kExists:
        if (!value) return false;
        break;
      case Requirement::Op::kNotExists:
        if (value) return false;
        break;
    }
  }
  for (const Requirement& r : fields) {
    std::string value = FieldValue(object, r.key).value_or("");
    bool equal = value == r.values.front();
    if ((r.op == Requirement::Op::kEq) != equal) return false;
  }
  return true;
}

std::string Line(const std::string& type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump() + "\n";
}

Json DiscoveryFor(const std::string& group_version) {
  Json resources = Json::array();
  for (const KindInfo& k : kKinds) {
    if (group_version != k.group_version) continue;
    std::string singular = k.kind;
    std::transform(singular.begin(), singular.end(), singular.begin(), ::tolower);
    resources.push_back({{"name", k.plural},
                         {"singularName", singular},
                         {"namespaced", k.namespaced},
                         {"kind", k.kind},
                         {"verbs", {"create", "delete", "get", "list", "patch", "update", "watch"}}});
    if (std::string_view(k.plural) == "pods") {
      resources.push_back({{"name", "pods/binding"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"kind", "Binding"},
                           {"verbs", {"create"}}});
    }
  }
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group_version},
          {"resources", resources}};
}

}  // namespace

// One open watch stream.
struct FakeApiServer::Watch {
  std::string resource;
  std::string ns;
  std::vector<Requirement> labels;
  std::vector<Requirement> fields;
  int64_t cursor = 0;
  std::vector<std::string> initial;  // synthetic ADDED lines for a watch from "" or "0"
  bool bookmarks = false;
  std::chrono::steady_clock::time_point next_bookmark;
  std::chrono::steady_clock::time_point deadline;
  uint64_t generation = 0;
  int drop_after = -1;  // events sent before the connection is cut; -1: never
  bool truncate = false;
  int sent = 0;
};

FakeApiServer::FakeApiServer(FakeApiServerOptions options)
    : options_(std::move(options)), token_(options_.token) {}

FakeApiServer::~FakeApiServer() { Stop(); }

std::string FakeApiServer::url() const {
  return std::string(options_.tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

std::string FakeApiServer::KubeconfigYaml() const {
  std::string user = "{}";
  {
    std::lock_guard lock(mu_);
    if (!token_.empty()) user = "{token: " + token_ + "}";
  }
  return "apiVersion: v1\nkind: Config\nclusters:\n- name: mgpu-local\n  cluster: {server: \"" + url() +
         "\"" + (options_.tls ? ", insecure-skip-tls-verify: true" : "") +
         "}\nusers:\n- name: mgpu-local\n  user: " + user +
         "\ncontexts:\n- name: mgpu-local\n  context: {cluster: mgpu-local, user: mgpu-local}\n"
         "current-context: mgpu-local\n";
}

Status FakeApiServer::Start() {
  if (options_.tls) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options_.cert_file.c_str(), options_.key_file.c_str(),
        options_.client_ca_file.empty() ? nullptr : options_.client_ca_file.c_str());
    if (!ssl->is_valid()) return Error{"fake API server: cannot load TLS certificate " + options_.cert_file};
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  // Every watch holds a server thread for its lifetime.
  server_->new_task_queue = [] { return new httplib::ThreadPool(64); };
  server_->set_keep_alive_timeout(1);
  server_->set_tcp_nodelay(true);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) return Error{"fake API server: cannot bind a port on 127.0.0.1"};
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() is a no-op until the accept loop runs, so Start returns only once it does.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (!server_->is_running()) return Error{"fake API server: the accept loop did not start"};
  return Status::Ok();
}

void FakeApiServer::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool FakeApiServer::WaitWhileRunning(std::chrono::milliseconds delay) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, delay, [this] { return stopping_; });
  return !stopping_;
}

// --- Store
// -----------------------------------------------------------------------------------------------------

void FakeApiServer::RecordLocked(const std::string& resource, const std::string& type, const Json& object,
                                 Json old_object) {
  history_.push_back(Event{rv_, resource, type, object, std::move(old_object)});
  while (history_.size() > options_.history_limit) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
  cv_.notify_all();
}

Outcome FakeApiServer::CreateLocked(const std::string& resource, const std::string& path_ns, Json object) {
  const KindInfo* kind = FindKind(resource);
  if (kind == nullptr) return Fail(404, "NotFound", "the server could not find the requested resource");
  if (!object.is_object()) return Fail(400, "BadRequest", "the body is not a JSON object");
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = Json::object();
  Json& metadata = object["metadata"];
  std::string ns;
  if (kind->namespaced) {
    ns = kube::MetadataString(object, "namespace");
    if (!path_ns.empty() && !ns.empty() && ns != path_ns) {
      return Fail(400, "BadRequest",
                  "the namespace of the provided object does not match the namespace sent on the request");
    }
    if (ns.empty()) ns = path_ns.empty() ? "default" : path_ns;
    metadata["namespace"] = ns;
  } else {
    metadata.erase("namespace");
  }
  std::string name = kube::MetadataString(object, "name");
  if (name.empty() && !kube::MetadataString(object, "generateName").empty()) {
    name = kube::MetadataString(object, "generateName") + RandomHex(5);
    metadata["name"] = name;
  }
  if (name.empty()) return Fail(422, "Invalid", std::string(kind->kind) + " has no metadata.name");
  auto& store = objects_[resource];
  if (store.contains(Key(ns, name))) {
    return Fail(409, "AlreadyExists", std::string(kind->plural) + " \"" + name + "\" already exists");
  }
  object["apiVersion"] = kind->group_version;
  object["kind"] = kind->kind;
  metadata["uid"] = NewUid();
  metadata["creationTimestamp"] = Rfc3339(UnixNowNs());
  metadata["resourceVersion"] = std::to_string(++rv_);
  store[Key(ns, name)] = object;
  RecordLocked(resource, "ADDED", object, nullptr);
  return {201, object};
}

Outcome FakeApiServer::UpdateLocked(const std::string& resource, const std::string& ns,
                                    const std::string& name, Json object) {
  const KindInfo* kind = FindKind(resource);
  if (kind == nullptr) return Fail(404, "NotFound", "the server could not find the requested resource");
  if (!object.is_object()) return Fail(400, "BadRequest", "the body is not a JSON object");
  std::string store_ns = kind->namespaced ? ns : "";
  auto& store = objects_[resource];
  auto it = store.find(Key(store_ns, name));
  if (it == store.end()) return NotFound(*kind, name);
  if (kube::MetadataString(object, "name") != name) {
    return Fail(400, "BadRequest", "the name of the object does not match the name on the URL");
  }
  std::string version = kube::MetadataString(object, "resourceVersion");
  if (!version.empty() && version != kube::MetadataString(it->second, "resourceVersion"))
    return Conflict(*kind, name);
  Json& metadata = object["metadata"];
  for (const char* key : {"uid", "creationTimestamp", "resourceVersion"})
    metadata[key] = it->second["metadata"][key];
  if (kind->namespaced) metadata["namespace"] = store_ns;
  object["apiVersion"] = kind->group_version;
  object["kind"] = kind->kind;
  if (object == it->second) return {200, object};  // a no-op write changes nothing, as in the API server
  metadata["resourceVersion"] = std::to_string(++rv_);
  Json old = std::move(it->second);
  it->second = object;
  RecordLocked(resource, "MODIFIED", object, std::move(old));
  return {200, object};
}

Outcome FakeApiServer::PatchLocked(const std::string& resource, const std::string& ns,
                                   const std::string& name, const Json& patch,
                                   const std::string& content_type) {
  const KindInfo* kind = FindKind(resource);
  if (kind == nullptr) return Fail(404, "NotFound", "the server could not find the requested resource");
  auto& store = objects_[resource];
  auto it = store.find(Key(kind->namespaced ? ns : "", name));
  if (it == store.end()) return NotFound(*kind, name);
  Json patched = it->second;
  if (content_type == "application/json-patch+json") {
    if (!patch.is_array()) return Fail(400, "BadRequest", "a JSON patch must be an array");
    try {
      patched = it->second.patch(patch);
    } catch (const Json::exception& e) {
      return Fail(422, "Invalid", std::string("the JSON patch cannot be applied: ") + e.what());
    }
  } else if (content_type == "application/merge-patch+json" ||
             content_type == "application/strategic-merge-patch+json") {
    if (!patch.is_object()) return Fail(400, "BadRequest", "a merge patch must be a JSON object");
    patched.merge_patch(patch);
  } else {
    return Fail(415, "UnsupportedMediaType",
                "the media type " + content_type + " is not supported for PATCH");
  }
  if (!patched.is_object() || !patched.contains("metadata") || !patched["metadata"].is_object()) {
    return Fail(422, "Invalid", "the patch removes the object's metadata");
  }
  std::string version = kube::MetadataString(patched, "resourceVersion");
  if (!version.empty() && version != kube::MetadataString(it->second, "resourceVersion"))
    return Conflict(*kind, name);
  Json& metadata = patched["metadata"];
  for (const char* key : {"name", "namespace", "uid", "creationTimestamp", "resourceVersion"}) {
    if (it->second["metadata"].contains(key)) metadata[key] = it->second["metadata"][key];
  }
  patched["apiVersion"] = kind->group_version;
  patched["kind"] = kind->kind;
  if (patched == it->second) return {200, patched};
  metadata["resourceVersion"] = std::to_string(++rv_);
  Json old = std::move(it->second);
  it->second = patched;
  RecordLocked(resource, "MODIFIED", patched, std::move(old));
  return {200, patched};
}

Outcome FakeApiServer::DeleteLocked(const std::string& resource, const std::string& ns,
                                    const std::string& name) {
  const KindInfo* kind = FindKind(resource);
  if (kind == nullptr) return Fail(404, "NotFound", "the server could not find the requested resource");
  auto& store = objects_[resource];
  auto it = store.find(Key(kind->namespaced ? ns : "", name));
  if (it == store.end()) return NotFound(*kind, name);
  Json object = std::move(it->second);
  store.erase(it);
  object["metadata"]["resourceVersion"] = std::to_string(++rv_);
  RecordLocked(resource, "DELETED", object, nullptr);
  return {200, object};
}

Outcome FakeApiServer::BindLocked(const std::string& ns, const std::string& name, const Json& binding) {
  const KindInfo& pods = *FindKind("pods");
  if (!binding.is_object()) return Fail(400, "BadRequest", "the body is not a JSON object");
  auto& store = objects_["pods"];
  auto it = store.find(Key(ns, name));
  if (it == store.end()) return NotFound(pods, name);
  std::string node;
  if (binding.contains("target") && binding["target"].is_object() && binding["target"].contains("name") &&
      binding["target"]["name"].is_string()) {
    node = binding["target"]["name"].get<std::string>();
  }
  if (node.empty()) return Fail(422, "Invalid", "the binding has no target.name");
  std::string uid = kube::MetadataString(binding, "uid");
  if (!uid.empty() && uid != kube::MetadataString(it->second, "uid")) {
    return Fail(409, "Conflict",
                "Operation cannot be fulfilled on pods/binding \"" + name +
                    "\": the pod's uid does not match the binding's");
  }
  Json& pod = it->second;
  if (pod.contains("spec") && pod["spec"].is_object() && pod["spec"].contains("nodeName") &&
      pod["spec"]["nodeName"].is_string() && !pod["spec"]["nodeName"].get<std::string>().empty()) {
    return Fail(409, "Conflict",
                "Operation cannot be fulfilled on pods/binding \"" + name + "\": pod " + name +
                    " is already assigned to node \"" + pod["spec"]["nodeName"].get<std::string>() + "\"");
  }
  const std::string version = kube::MetadataString(binding, "resourceVersion");
  if (!version.empty() && version != kube::MetadataString(pod, "resourceVersion")) {
    return Fail(
        409, "Conflict",
        "Operation cannot be fulfilled on pods/binding \"" + name +
            "\": the object has been modified; please apply your changes to the latest version and try "
            "again");
  }
  Json old = pod;
  if (!pod.contains("spec") || !pod["spec"].is_object()) pod["spec"] = Json::object();
  pod["spec"]["nodeName"] = node;
  // As kube-apiserver's pods/binding: the Binding's annotations land on the pod in the same update.
  const Json* annotations = kube::FindPath(binding, {"metadata", "annotations"});
  if (annotations && annotations->is_object() && !annotations->empty()) {
    Json& kept = pod["metadata"]["annotations"];
    if (!kept.is_object()) kept = Json::object();  // a malformed pod stored raw (StoreRaw) gets a map
    for (const auto& [key, value] : annotations->items()) kept[key] = value;
  }
  pod["metadata"]["resourceVersion"] = std::to_string(++rv_);
  RecordLocked("pods", "MODIFIED", pod, std::move(old));
  return {201, StatusJson(201, "", "")};
}

Outcome FakeApiServer::ListLocked(const std::string& resource, const std::string& ns,
                                  const std::string& label_selector, const std::string& field_selector,
                                  const std::string& limit, const std::string& continue_token) {
  const KindInfo* kind = FindKind(resource);
  if (kind == nullptr) return Fail(404, "NotFound", "the server could not find the requested resource");
  int64_t version = rv_;
  std::vector<Json> items;
  if (!continue_token.empty()) {
    auto page = pages_.find(continue_token);
    if (page == pages_.end()) {
      return Fail(410, "Expired",
                  "The provided continue parameter is too old to display a consistent list result. You can "
                  "start a new list without the continue parameter.");
    }
    version = page->second.first;
    items = std::move(page->second.second);
    pages_.erase(page);
  } else {
    auto labels = ParseSelector(label_selector, false);
    auto fields = ParseSelector(field_selector, true);
    if (!labels) return Fail(400, "BadRequest", "unable to parse requirement: " + label_selector);
    if (!fields) return Fail(400, "BadRequest", "invalid field selector: " + field_selector);
    if (auto store = objects_.find(resource); store != objects_.end()) {
      for (const auto& [key, object] : store->second) {
        if (!ns.empty() && kube::MetadataString(object, "namespace") != ns) continue;
        if (Matches(object, *labels, *fields)) items.push_back(object);
      }
    }
  }
  Json metadata = {{"resourceVersion", std::to_string(version)}};
  const long page_size = limit.empty() ? 0 : std::atol(limit.c_str());
  if (page_size > 0 && items.size() > static_cast<size_t>(page_size)) {
    const std::string token = "page-" + std::to_string(++next_page_);
    pages_[token] = {version, std::vector<Json>(items.begin() + page_size, items.end())};
    items.resize(static_cast<size_t>(page_size));
    metadata["continue"] = token;
    metadata["remainingItemCount"] = pages_[token].second.size();
  }
  return {200,
          {{"kind", std::string(kind->kind) + "List"},
           {"apiVersion", kind->group_version},
           {"metadata", metadata},
           {"items", items}}};
}

Result<Json> FakeApiServer::Create(const std::string& resource, Json object) {
  std::lock_guard lock(mu_);
  Outcome out = CreateLocked(resource, "", std::move(object));
  if (out.code >= 300) return Error{out.body.value("message", "create failed")};
  return out.body;
}

Result<Json> FakeApiServer::Update(const std::string& resource, Json object) {
  std::lock_guard lock(mu_);
  const KindInfo* kind = FindKind(resource);
  std::string ns = kube::MetadataString(object, "namespace");
  if (kind != nullptr && kind->namespaced && ns.empty()) ns = "default";
  const std::string name = kube::MetadataString(object, "name");  // before the move below (argument order)
  Outcome out = UpdateLocked(resource, ns, name, std::move(object));
  if (out.code >= 300) return Error{out.body.value("message", "update failed")};
  return out.body;
}

Result<Json> FakeApiServer::MergePatch(const std::string& resource, const std::string& ns,
                                       const std::string& name, const Json& patch) {
  std::lock_guard lock(mu_);
  Outcome out = PatchLocked(resource, ns, name, patch, "application/merge-patch+json");
  if (out.code >= 300) return Error{out.body.value("message", "patch failed")};
  return out.body;
}

Status FakeApiServer::Delete(const std::string& resource, const std::string& ns, const std::string& name) {
  std::lock_guard lock(mu_);
  Outcome out = DeleteLocked(resource, ns, name);
  if (out.code >= 300) return Error{out.body.value("message", "delete failed")};
  return Status::Ok();
}

std::optional<Json> FakeApiServer::Get(const std::string& resource, const std::string& ns,
                                       const std::string& name) const {
  std::lock_guard lock(mu_);
  auto store = objects_.find(resource);
  if (store == objects_.end()) return std::nullopt;
  auto it = store->second.find(Key(ns, name));
  if (it == store->second.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> FakeApiServer::List(const std::string& resource, const std::string& ns) const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  if (auto store = objects_.find(resource); store != objects_.end()) {
    for (const auto& [key, object] : store->second) {
      if (ns.empty() || kube::MetadataString(object, "namespace") == ns) out.push_back(object);
    }
  }
  return out;
}

int64_t FakeApiServer::resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

// --- Faults and observation
// ------------------------------------------------------------------------------------

void FakeApiServer::InjectFault(Fault fault) {
  std::lock_guard lock(mu_);
  faults_.push_back(std::move(fault));
}

void FakeApiServer::ClearFaults() {
  std::lock_guard lock(mu_);
  faults_.clear();
}

void FakeApiServer::DropWatches() {
  {
    std::lock_guard lock(mu_);
    ++drop_generation_;
  }
  cv_.notify_all();
}

void FakeApiServer::Compact() {
  {
    std::lock_guard lock(mu_);
    compacted_rv_ = rv_;
    history_.clear();
    pages_.clear();
  }
  cv_.notify_all();
}

void FakeApiServer::SetToken(std::string token) {
  std::lock_guard lock(mu_);
  token_ = std::move(token);
}

void FakeApiServer::SendRawWatchLine(const std::string& resource, const std::string& line) {
  std::lock_guard lock(mu_);
  ++rv_;
  RecordLocked(resource, "RAW", line, nullptr);
}

void FakeApiServer::StoreRaw(const std::string& resource, const std::string& key, Json object) {
  std::lock_guard lock(mu_);
  objects_[resource][key] = std::move(object);
}

int FakeApiServer::open_watches() const {
  std::lock_guard lock(mu_);
  return open_watches_;
}

int FakeApiServer::pending_faults() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(faults_.size());
}

std::vector<RecordedRequest> FakeApiServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::optional<Fault> FakeApiServer::TakeFault(const httplib::Request& req, bool watch) {
  std::lock_guard lock(mu_);
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (!it->method.empty() && it->method != req.method) continue;
    if (!req.path.starts_with(it->path_prefix)) continue;
    if (it->watch && *it->watch != watch) continue;
    if (!it->with_param.empty() && !req.has_param(it->with_param)) continue;
    Fault fault = *it;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    return fault;
  }
  return std::nullopt;
}

// --- HTTP
// ------------------------------------------------------------------------------------------------------

// What a resource path names: /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]], or /apis/GROUP/VERSION/... .
struct FakeApiServer::Route {
  std::string group_version;
  std::string ns;
  std::string plural;
  std::string name;
  std::string sub;
  const KindInfo* kind = nullptr;  // null only for the bindings collection (POST .../namespaces/NS/bindings)
};

namespace {

Outcome NoSuchResource() { return Fail(404, "NotFound", "the server could not find the requested resource"); }

std::vector<std::string> PathParts(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t start = 1; start <= path.size();) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

Json ApiGroupList() {
  Json groups = Json::array();
  for (const char* gv : {"coordination.k8s.io/v1", "apps/v1", "batch/v1"}) {
    std::string text = gv;
    std::string group = text.substr(0, text.find('/'));
    Json version = {{"groupVersion", text}, {"version", "v1"}};
    groups.push_back({{"name", group}, {"versions", {version}}, {"preferredVersion", version}});
  }
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

// The reply, or with `truncate` half of it before the connection closes.
void Reply(httplib::Response& res, const Outcome& out, bool truncate = false) {
  res.status = out.code;
  if (!truncate) return res.set_content(out.body.dump(), "application/json");
  auto text = std::make_shared<std::string>(out.body.dump());
  size_t half = text->size() / 2;
  res.set_content_provider(text->size(), "application/json",
                           [text, half](size_t offset, size_t length, httplib::DataSink& sink) {
                             if (offset >= half) return false;  // closes the connection mid-body
                             return sink.write(text->data() + offset, std::min(length, half - offset));
                           });
}

}  // namespace

std::optional<Outcome> FakeApiServer::Admit(const httplib::Request& req, bool watch, uint64_t& generation) {
  std::lock_guard lock(mu_);
  RecordedRequest record{req.method, req.path, {}, watch, req.get_header_value("Authorization")};
  for (const auto& [key, value] : req.params) record.params[key] = value;
  requests_.push_back(std::move(record));
  generation = drop_generation_;  // a drop also cuts watches still waiting out an injected delay
  if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_)
    return Fail(401, "Unauthorized", "Unauthorized");
  return std::nullopt;
}

std::optional<Outcome> FakeApiServer::ApplyFault(const httplib::Request& req, httplib::Response& res,
                                                 bool watch, int& drop_after, bool& truncate) {
  std::optional<Fault> fault = TakeFault(req, watch);
  if (!fault) return std::nullopt;
  switch (fault->action) {
    case Fault::Action::kStatus: {
      static const std::map<int, std::string> kReasons = {
          {410, "Expired"},  {429, "TooManyRequests"}, {500, "InternalError"}, {503, "ServiceUnavailable"},
          {409, "Conflict"}, {404, "NotFound"},        {403, "Forbidden"},     {401, "Unauthorized"}};
      auto reason = kReasons.find(fault->status);
      if (fault->status == 429) res.set_header("Retry-After", std::to_string(fault->retry_after_seconds));
      return Fail(fault->status, reason != kReasons.end() ? reason->second : "",
                  "injected fault: HTTP " + std::to_string(fault->status));
    }
    case Fault::Action::kDelay:
      if (!WaitWhileRunning(fault->delay)) return Fail(503, "ServiceUnavailable", "shutting down");
      break;
    case Fault::Action::kTruncateBody:
      truncate = true;
      drop_after = fault->events_before_drop;
      break;
    case Fault::Action::kDropWatch:
      drop_after = fault->events_before_drop;
      break;
  }
  return std::nullopt;
}

std::optional<Outcome> FakeApiServer::Resolve(const std::string& path, const std::string& method,
                                              Route& route) {
  if (path == "/version") {
    return Outcome{
        200,
        {{"major", "1"}, {"minor", "32"}, {"gitVersion", "v1.32.0-mgpu-fake"}, {"platform", "linux/amd64"}}};
  }
  const std::vector<std::string> parts = PathParts(path);
  if (parts.empty()) return NoSuchResource();
  size_t rest = 0;
  if (parts[0] == "api") {
    if (parts.size() == 1) {
      return Outcome{
          200,
          {{"kind", "APIVersions"},
           {"versions", {"v1"}},
           {"serverAddressByClientCIDRs", {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1"}}}}}};
    }
    route.group_version = parts[1];
    rest = 2;
  } else if (parts[0] == "apis") {
    if (parts.size() == 1) return Outcome{200, ApiGroupList()};
    if (parts.size() < 3) return NoSuchResource();
    route.group_version = parts[1] + "/" + parts[2];
    rest = 3;
  } else {
    return NoSuchResource();
  }
  if (parts.size() == rest) {
    Json list = DiscoveryFor(route.group_version);
    if (list["resources"].empty()) return NoSuchResource();
    return Outcome{200, list};
  }
  if (parts[rest] == "namespaces" && parts.size() >= rest + 3) {
    route.ns = parts[rest + 1];
    rest += 2;
  } else if (parts[rest] == "namespaces" && route.group_version == "v1" && method == "GET" &&
             parts.size() == rest + 2) {
    // Namespaces are not stored; every namespace exists and is active.
    return Outcome{200,
                   {{"kind", "Namespace"},
                    {"apiVersion", "v1"},
                    {"metadata", {{"name", parts[rest + 1]}}},
                    {"status", {{"phase", "Active"}}}}};
  }
  route.plural = parts[rest];
  route.name = parts.size() > rest + 1 ? parts[rest + 1] : "";
  route.sub = parts.size() > rest + 2 ? parts[rest + 2] : "";
  if (route.group_version == "v1" && route.plural == "bindings" && method == "POST" && !route.ns.empty() &&
      route.name.empty())
    return std::nullopt;
  const KindInfo* kind = FindKind(route.plural);
  if (kind == nullptr || route.group_version != kind->group_version || parts.size() > rest + 3 ||
      (!kind->namespaced && !route.ns.empty()) ||
      (kind->namespaced && !route.name.empty() && route.ns.empty()) ||
      (!route.sub.empty() && route.sub != "status" && !(route.sub == "binding" && route.plural == "pods"))) {
    return NoSuchResource();
  }
  route.kind = kind;
  return std::nullopt;
}

Outcome FakeApiServer::GetLocked(const Route& route) {
  auto& store = objects_[route.plural];
  auto it = store.find(Key(route.ns, route.name));
  return it == store.end() ? NotFound(*route.kind, route.name) : Outcome{200, it->second};
}

Outcome FakeApiServer::ServeLocked(const httplib::Request& req, const Route& route, const Json& body) {
  const std::string& method = req.method;
  const bool named = !route.name.empty();
  if (route.kind == nullptr) return BindLocked(route.ns, kube::MetadataString(body, "name"), body);
  if (method == "GET" && !named) {
    return ListLocked(route.plural, route.ns, req.get_param_value("labelSelector"),
                      req.get_param_value("fieldSelector"), req.get_param_value("limit"),
                      req.get_param_value("continue"));
  }
  if (method == "GET") return GetLocked(route);
  if (method == "POST" && !named) return CreateLocked(route.plural, route.ns, body);
  if (method == "POST" && route.sub == "binding") return BindLocked(route.ns, route.name, body);
  if (method == "PUT" && named && route.sub != "binding")
    return UpdateLocked(route.plural, route.ns, route.name, body);
  if (method == "PATCH" && named && route.sub != "binding") {
    std::string content_type = req.get_header_value("Content-Type");
    content_type = Trim(content_type.substr(0, content_type.find(';')));
    return PatchLocked(route.plural, route.ns, route.name, body, content_type);
  }
  if (method == "DELETE" && named && route.sub.empty())
    return DeleteLocked(route.plural, route.ns, route.name);
  return Fail(405, "MethodNotAllowed", "the server does not allow this method on the resource");
}

void FakeApiServer::Handle(const httplib::Request& req, httplib::Response& res) {
  const bool watch = req.get_param_value("watch") == "true" || req.get_param_value("watch") == "1";
  uint64_t generation = 0;
  if (std::optional<Outcome> refused = Admit(req, watch, generation)) return Reply(res, *refused);
  int drop_after = -1;
  bool truncate = false;
  if (std::optional<Outcome> injected = ApplyFault(req, res, watch, drop_after, truncate))
    return Reply(res, *injected);
  Route route;
  if (std::optional<Outcome> answer = Resolve(req.path, req.method, route)) return Reply(res, *answer);
  Json body;
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return Reply(res, Fail(400, "BadRequest", "the request body is not valid JSON"));
  }
  if (req.method == "GET" && route.name.empty() && watch)
    return ServeWatch(route.plural, route.ns, req, res, generation, drop_after, truncate);
  Outcome out;
  {
    std::lock_guard lock(mu_);
    out = ServeLocked(req, route, body);
  }
  Reply(res, out, truncate);
}

void FakeApiServer::ServeWatch(const std::string& resource, const std::string& ns,
                               const httplib::Request& req, httplib::Response& res, uint64_t generation,
                               int drop_after, bool truncate) {
  auto w = std::make_shared<Watch>();
  w->resource = resource;
  w->ns = ns;
  auto labels = ParseSelector(req.get_param_value("labelSelector"), false);
  auto fields = ParseSelector(req.get_param_value("fieldSelector"), true);
  auto bad = [&res](const std::string& message) {
    res.status = 400;
    res.set_content(StatusJson(400, "BadRequest", message).dump(), "application/json");
  };
  if (!labels || !fields) return bad("invalid selector");
  w->labels = std::move(*labels);
  w->fields = std::move(*fields);
  w->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  w->drop_after = drop_after;
  w->truncate = truncate;
  long timeout = 1800;
  if (req.has_param("timeoutSeconds")) timeout = std::atol(req.get_param_value("timeoutSeconds").c_str());
  auto now = std::chrono::steady_clock::now();
  w->deadline = now + std::chrono::seconds(timeout);
  w->next_bookmark = now + options_.bookmark_interval;
  std::string version = req.get_param_value("resourceVersion");
  {
    std::lock_guard lock(mu_);
    w->generation = generation;
    if (version.empty() || version == "0") {
      w->cursor = rv_;
      if (auto store = objects_.find(resource); store != objects_.end()) {
        for (const auto& [key, object] : store->second) {
          if ((ns.empty() || kube::MetadataString(object, "namespace") == ns) &&
              Matches(object, w->labels, w->fields)) {
            w->initial.push_back(Line("ADDED", object));
          }
        }
      }
    } else {
      char* end = nullptr;
      w->cursor = std::strtoll(version.c_str(), &end, 10);
      if (end == version.c_str() || *end != '\0') return bad("invalid resourceVersion " + version);
    }
    ++open_watches_;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [this, w](size_t, httplib::DataSink& sink) {
        using Clock = std::chrono::steady_clock;
        std::vector<std::pair<std::string, bool>> lines;  // (line, is_bookmark)
        bool finish = false;
        {
          std::unique_lock lock(mu_);
          bool cut_now = w->drop_after >= 0 && !w->truncate && w->sent >= w->drop_after;
          if (!cut_now) {
            cv_.wait_for(lock, std::chrono::milliseconds(50), [&] {
              auto now = Clock::now();
              return stopping_ || drop_generation_ != w->generation || rv_ > w->cursor ||
                     !w->initial.empty() || (w->bookmarks && now >= w->next_bookmark) || now >= w->deadline;
            });
          }
          if (cut_now || stopping_ || drop_generation_ != w->generation) return false;
          if (w->cursor < compacted_rv_) {
            lines.emplace_back(
                Line("ERROR", StatusJson(410, "Expired",
                                         "too old resource version: " + std::to_string(w->cursor) + " (" +
                                             std::to_string(compacted_rv_) + ")")),
                false);
            finish = true;
          } else {
            for (std::string& line : w->initial) lines.emplace_back(std::move(line), false);
            w->initial.clear();
            auto first = std::upper_bound(history_.begin(), history_.end(), w->cursor,
                                          [](int64_t rv, const Event& e) { return rv < e.rv; });
            for (auto it = first; it != history_.end(); ++it) {
              if (it->resource != w->resource) continue;
              if (it->type == "RAW") {
                lines.emplace_back(it->object.get<std::string>() + "\n", false);
                continue;
              }
              auto selected = [&](const Json& object) {
                return !object.is_null() &&
                       (w->ns.empty() || kube::MetadataString(object, "namespace") == w->ns) &&
                       Matches(object, w->labels, w->fields);
              };
              bool now_in = selected(it->object);
              bool was_in = it->type == "MODIFIED" && selected(it->old_object);
              std::string type;
              if (it->type == "MODIFIED") {
                type = now_in && was_in ? "MODIFIED" : now_in ? "ADDED" : was_in ? "DELETED" : "";
              } else if (now_in) {
                type = it->type;
              }
              if (!type.empty()) lines.emplace_back(Line(type, it->object), false);
            }
            w->cursor = rv_;
            auto now = Clock::now();
            if (w->bookmarks && now >= w->next_bookmark) {
              const KindInfo* kind = FindKind(w->resource);
              lines.emplace_back(
                  Line("BOOKMARK", {{"kind", kind->kind},
                                    {"apiVersion", kind->group_version},
                                    {"metadata", {{"resourceVersion", std::to_string(w->cursor)}}}}),
                  true);
              w->next_bookmark = now + options_.bookmark_interval;
            }
            if (now >= w->deadline) finish = true;
          }
        }
        for (const auto& [line, bookmark] : lines) {
          if (!bookmark && w->drop_after >= 0 && w->sent >= w->drop_after) {
            if (w->truncate) sink.write(line.data(), line.size() / 2);
            return false;
          }
          if (!sink.write(line.data(), line.size())) return false;
          if (!bookmark) ++w->sent;
        }
        if (finish) sink.done();
        return true;
      },
      [this](bool) {
        std::lock_guard lock(mu_);
        --open_watches_;
      });
}

}  // namespace mgpu::testing
