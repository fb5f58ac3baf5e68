#include "common/kube/informer.h"

#include <spdlog/spdlog.h>

#include <random>

namespace mgpu::kube {
namespace {

std::string Key(const Json& object) {
  return MetadataString(object, "namespace") + "/" + MetadataString(object, "name");
}

}  // namespace

Informer::Informer(Client& client, InformerOptions options, InformerHandlers handlers)
    : client_(client), options_(std::move(options)), handlers_(std::move(handlers)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_.Start([this] { Run(); });
}

void Informer::Stop() {
  thread_.Stop([this] { cancel_.Cancel(); });
}

bool Informer::HasSynced() const {
  std::lock_guard lock(mu_);
  return synced_;
}

bool Informer::Overfull() const {
  std::lock_guard lock(mu_);
  return overfull_;
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return synced_ || thread_.stopping(); });
  return synced_;
}

std::vector<Json> Informer::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  out.reserve(objects_.size());
  for (const auto& [key, kept] : objects_) out.push_back(Unpack(kept));
  return out;
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(ns + "/" + name);
  if (it == objects_.end()) return std::nullopt;
  return Unpack(it->second);
}

Informer::Kept Informer::Pack(const Json& object) {
  Kept kept{MetadataString(object, "uid"), MetadataString(object, "resourceVersion"),
            Json::to_msgpack(object)};
  kept.packed.shrink_to_fit();
  return kept;
}

Json Informer::Unpack(const Kept& kept) { return Json::from_msgpack(kept.packed); }

std::string Informer::resource_version() const {
  std::lock_guard lock(mu_);
  return resource_version_;
}

int Informer::list_count() const {
  std::lock_guard lock(mu_);
  return list_count_;
}

bool Informer::Valid(const Json& object) const {
  if (!MetadataString(object, "name").empty() && !MetadataString(object, "resourceVersion").empty())
    return true;
  spdlog::warn("kube: skipping a malformed object kind={} namespace={} name={}", options_.resource.kind,
               MetadataString(object, "namespace"), MetadataString(object, "name"));
  return false;
}

void Informer::Run() {
  bool need_list = true;
  int failures = 0;
  while (true) {
    if (thread_.stopping()) return;
    if (need_list) {
      if (!ListAndReplace()) {
        if (!Backoff(++failures)) return;
        continue;
      }
      need_list = false;
    }
    bool saw_event = false;
    WatchEnd end = WatchOnce(saw_event);
    if (thread_.stopping()) return;
    if (saw_event) failures = 0;
    if (end != WatchEnd::kClean) need_list = true;
    // A busy stream that the server closes resumes at once, and the first 410 Gone relists at once (the
    // normal case after compaction); anything else, or a repeat, waits out the backoff.
    if (end == WatchEnd::kClean && saw_event) continue;
    if (end == WatchEnd::kGone && failures == 0) {
      failures = 1;
      continue;
    }
    if (!Backoff(++failures)) return;
  }
}

bool Informer::ListAndReplace() {
  ApiResult list = client_.List(options_.resource, options_.ns, options_.selectors, &cancel_);
  if (!list) {
    spdlog::warn("kube: listing {} failed: {}", options_.resource.kind, list.message());
    return false;
  }
  Json body = std::move(list).value();
  std::string version = MetadataString(body, "resourceVersion");
  std::map<std::string, Json> fresh;
  if (Json& items = body["items"]; items.is_array()) {
    for (Json& item : items) {
      if (options_.transform) options_.transform(item);
      if (!Valid(item)) continue;
      std::string key = Key(item);  // before the move: json's operator= takes its argument by value
      fresh[std::move(key)] = std::move(item);
    }
  }
  body = nullptr;
  if (options_.max_objects && fresh.size() > options_.max_objects) {
    std::lock_guard lock(mu_);
    OverfullLocked(fresh.size());
    return false;
  }
  std::vector<Delivery> deliveries;
  {
    std::lock_guard lock(mu_);
    overfull_ = false;
    std::map<std::string, Kept> kept;
    for (auto& [key, object] : fresh) {
      auto old = objects_.find(key);
      if (old == objects_.end()) {
        deliveries.push_back({Delivery::Type::kAdd, nullptr, object});
      } else if (old->second.uid != MetadataString(object, "uid")) {
        deliveries.push_back({Delivery::Type::kDelete, Unpack(old->second), nullptr});
        deliveries.push_back({Delivery::Type::kAdd, nullptr, object});
      } else if (old->second.version != MetadataString(object, "resourceVersion")) {
        deliveries.push_back({Delivery::Type::kUpdate, Unpack(old->second), object});
      }
      kept.emplace(key, Pack(object));
    }
    for (auto& [key, old] : objects_) {
      if (!fresh.contains(key)) deliveries.push_back({Delivery::Type::kDelete, Unpack(old), nullptr});
    }
    objects_ = std::move(kept);
    resource_version_ = version;
    ++list_count_;
  }
  Deliver(deliveries);
  {
    std::lock_guard lock(mu_);
    synced_ = true;
  }
  cv_.notify_all();
  spdlog::debug("kube: listed {} at resourceVersion {}", options_.resource.kind, version);
  return true;
}

Informer::WatchEnd Informer::WatchOnce(bool& saw_event) {
  WatchOptions watch;
  watch.selectors = options_.selectors;
  watch.resource_version = resource_version();
  watch.server_timeout = options_.watch_timeout;
  watch.idle_timeout = options_.idle_timeout;
  bool gone = false;
  bool failed = false;
  ApiResult result = client_.Watch(
      options_.resource, options_.ns, watch,
      [&](WatchEvent event) {
        if (event.type == "ERROR") {
          auto code = event.object.find("code");
          if (code != event.object.end() && code->is_number_integer() && code->get<int>() == 410) {
            gone = true;
          } else {
            failed = true;
            spdlog::warn("kube: watch of {} returned an error: {}", options_.resource.kind,
                         event.object.dump());
          }
          return false;
        }
        saw_event = true;
        std::vector<Delivery> deliveries;
        bool overfull;
        {
          std::lock_guard lock(mu_);
          ApplyLocked(event.type, std::move(event.object), deliveries);
          overfull = overfull_;
        }
        Deliver(deliveries);
        if (overfull) failed = true;  // relist: only a whole list says when the objects fit again
        return !overfull;
      },
      &cancel_);
  if (gone || result.IsGone()) {
    spdlog::info("kube: watch of {} is too old (410 Gone); relisting", options_.resource.kind);
    return WatchEnd::kGone;
  }
  if (!result) {
    spdlog::warn("kube: watch of {} failed: {}", options_.resource.kind, result.message());
    return WatchEnd::kFailed;
  }
  return failed ? WatchEnd::kFailed : WatchEnd::kClean;
}

void Informer::ApplyLocked(const std::string& type, Json object, std::vector<Delivery>& out) {
  if (type == "BOOKMARK") {
    std::string version = MetadataString(object, "resourceVersion");
    if (!version.empty()) resource_version_ = version;
    return;
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    spdlog::warn("kube: skipping a watch event of unknown type {} kind={}", type, options_.resource.kind);
    return;
  }
  if (options_.transform) options_.transform(object);
  if (!Valid(object)) return;
  resource_version_ = MetadataString(object, "resourceVersion");
  std::string key = Key(object);
  auto old = objects_.find(key);
  if (type == "DELETED") {
    if (old == objects_.end()) return;
    out.push_back({Delivery::Type::kDelete, Unpack(old->second), object});
    objects_.erase(old);
    return;
  }
  if (old == objects_.end()) {
    if (options_.max_objects && objects_.size() >= options_.max_objects) {
      if (!overfull_) OverfullLocked(objects_.size() + 1);
      return;
    }
    objects_.emplace(key, Pack(object));
    out.push_back({Delivery::Type::kAdd, nullptr, std::move(object)});
    return;
  }
  if (old->second.version == MetadataString(object, "resourceVersion")) return;
  Kept now = Pack(object);
  if (old->second.uid != now.uid) {
    out.push_back({Delivery::Type::kDelete, Unpack(old->second), nullptr});
    out.push_back({Delivery::Type::kAdd, nullptr, std::move(object)});
  } else {
    out.push_back({Delivery::Type::kUpdate, Unpack(old->second), std::move(object)});
  }
  old->second = std::move(now);
}

void Informer::OverfullLocked(size_t count) {
  overfull_ = true;
  synced_ = false;
  spdlog::error("kube: {} {} objects, over the {} this informer may keep; not synced until they fit", count,
                options_.resource.kind, options_.max_objects);
}

void Informer::Deliver(std::vector<Delivery>& deliveries) {
  for (Delivery& d : deliveries) {
    switch (d.type) {
      case Delivery::Type::kAdd:
        if (handlers_.on_add) handlers_.on_add(d.new_object);
        break;
      case Delivery::Type::kUpdate:
        if (handlers_.on_update) handlers_.on_update(d.old_object, d.new_object);
        break;
      case Delivery::Type::kDelete:
        // The last state the informer saw: the deleted object from the watch, or the cached one after a
        // relist.
        if (handlers_.on_delete) handlers_.on_delete(d.new_object.is_null() ? d.old_object : d.new_object);
        break;
    }
  }
}

bool Informer::Backoff(int failures) {
  auto delay = options_.initial_backoff;
  for (int i = 1; i < failures && delay < options_.max_backoff; ++i) delay *= 2;
  delay = std::min(delay, options_.max_backoff);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  // Equal jitter: between half and all of the delay, so many informers do not relist in step.
  auto half = delay.count() / 2;
  delay = std::chrono::milliseconds(half +
                                    std::uniform_int_distribution<long long>(0, delay.count() - half)(rng));
  return thread_.SleepFor(delay);
}

}  // namespace mgpu::kube
