#include "common/codec.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <set>

#include "common/json_depth.h"

namespace mgpu {
namespace {

using nlohmann::json;

// Reads typed fields of one JSON object; the first error wins and names the field by its path.
class Fields {
 public:
  Fields(const json& object, std::string path, std::string& error)
      : o_(object), path_(std::move(path)), error_(error) {
    if (!o_.is_object()) Fail(path_.empty() ? "the value" : path_, "must be an object");
  }

  const json* Get(const char* key) {
    if (!error_.empty() || !o_.is_object()) return nullptr;
    auto it = o_.find(key);
    if (it == o_.end()) {
      Fail(Path(key), "is missing");
      return nullptr;
    }
    return &*it;
  }

  std::string String(const char* key) {
    const json* v = Get(key);
    if (v && !v->is_string()) Fail(Path(key), "must be a string");
    return v && v->is_string() ? v->get<std::string>() : std::string();
  }

  int64_t Int(const char* key, int64_t min, int64_t max = INT64_MAX) {
    const json* v = Get(key);
    if (!v) return 0;
    if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX)) {
      Fail(Path(key), "must be a whole number");
      return 0;
    }
    const int64_t n = v->get<int64_t>();
    if (n < min) Fail(Path(key), "must be at least " + std::to_string(min));
    if (n > max) Fail(Path(key), "must be at most " + std::to_string(max));
    return n;
  }

  bool Bool(const char* key) {
    const json* v = Get(key);
    if (v && !v->is_boolean()) Fail(Path(key), "must be true or false");
    return v && v->is_boolean() && v->get<bool>();
  }

  const json& Array(const char* key) {
    static const json kEmpty = json::array();
    const json* v = Get(key);
    if (v && !v->is_array()) Fail(Path(key), "must be a list");
    return v && v->is_array() ? *v : kEmpty;
  }

  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  void Fail(const std::string& where, const std::string& what) {
    if (error_.empty()) error_ = where + " " + what;
  }

 private:
  const json& o_;
  std::string path_;
  std::string& error_;
};

Result<json> ParseJson(std::string_view text, std::string_view what) {
  if (text.size() > kMaxAnnotationBytes)
    return Error{std::string(what) + " is " + std::to_string(text.size()) + " bytes, over the " +
                 std::to_string(kMaxAnnotationBytes) + " an annotation may hold"};
  if (!JsonDepthWithin(text))
    return Error{std::string(what) + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{std::string(what) + " is not valid JSON"};
  return j;
}

std::string Indexed(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

}  // namespace

std::string EncodeInventory(const NodeInventory& inventory) {
  json cards = json::array();
  for (const Card& c : inventory.cards) {
    cards.push_back({{"index", c.index},
                     {"uuid", c.uuid},
                     {"model", c.model},
                     {"memoryMiB", c.memory_mib},
                     {"healthy", c.healthy}});
  }
  json out = {{"cards", std::move(cards)},
              {"memoryUnitMiB", inventory.memory_unit_mib},
              {"isolation", Name(inventory.isolation)},
              {"version", inventory.version},
              {"heartbeat", inventory.heartbeat}};
  if (inventory.stopping) out["stopping"] = true;
  return out.dump();
}

Result<NodeInventory> DecodeInventory(std::string_view text) {
  auto j = ParseJson(text, "gpu-inventory");
  if (!j.ok()) return j.error();
  NodeInventory inv;
  std::string error;
  Fields f(*j, "", error);
  const json& cards = f.Array("cards");
  std::set<std::string> uuids;
  std::set<int64_t> indexes;
  for (size_t i = 0; i < cards.size() && error.empty(); ++i) {
    Fields c(cards[i], Indexed("cards", i), error);
    Card card;
    card.index = static_cast<int>(c.Int("index", 0, INT32_MAX));
    card.uuid = c.String("uuid");
    card.model = c.String("model");
    card.memory_mib = c.Int("memoryMiB", 0);
    card.healthy = c.Bool("healthy");
    if (error.empty() && card.uuid.empty()) c.Fail(c.Path("uuid"), "must not be empty");
    if (error.empty() && !uuids.insert(card.uuid).second) c.Fail(c.Path("uuid"), "repeats " + card.uuid);
    if (error.empty() && !indexes.insert(card.index).second)
      c.Fail(c.Path("index"), "repeats an earlier card's");
    inv.cards.push_back(std::move(card));
  }
  inv.memory_unit_mib = f.Int("memoryUnitMiB", 1);
  const std::string isolation = f.String("isolation");
  if (error.empty()) {
    auto backend = ParseIsolationBackend(isolation);
    if (!backend) f.Fail("isolation", "\"" + isolation + "\" is not one of none, hami-core, mps");
    inv.isolation = backend.value_or(IsolationBackend::kNone);
  }
  inv.version = f.String("version");
  inv.heartbeat = f.Int("heartbeat", 0);
  if (error.empty() && j->contains("stopping")) inv.stopping = f.Bool("stopping");
  if (!error.empty()) return Error{"gpu-inventory: " + error};
  return inv;
}

std::string EncodeAssignment(const Assignment& assignment) {
  json containers = json::array();
  for (const ContainerAssignment& ca : assignment.containers) {
    json cards = json::array();
    for (const CardShare& s : ca.cards) {
      cards.push_back({{"uuid", s.uuid},
                       {"core", s.core},
                       {"reclaimedCore", s.reclaimed_core},
                       {"memoryMiB", s.memory_mib}});
    }
    containers.push_back({{"name", ca.container}, {"cards", std::move(cards)}});
  }
  return json{{"containers", std::move(containers)}}.dump();
}

Result<Assignment> DecodeAssignment(std::string_view text) {
  auto j = ParseJson(text, "gpu assignment");
  if (!j.ok()) return j.error();
  Assignment out;
  std::string error;
  Fields f(*j, "", error);
  const json& containers = f.Array("containers");
  std::set<std::string> names;
  for (size_t i = 0; i < containers.size() && error.empty(); ++i) {
    Fields c(containers[i], Indexed("containers", i), error);
    ContainerAssignment ca;
    ca.container = c.String("name");
    if (error.empty() && !names.insert(ca.container).second)
      c.Fail(c.Path("name"), "repeats " + ca.container);
    const json& cards = c.Array("cards");
    if (error.empty() && cards.empty()) c.Fail(c.Path("cards"), "must not be empty");
    for (size_t k = 0; k < cards.size() && error.empty(); ++k) {
      Fields s(cards[k], Indexed(c.Path("cards"), k), error);
      CardShare share;
      share.uuid = s.String("uuid");
      // Bounded before the narrowing: 2^32 + 50 must not read as 50.
      share.core = static_cast<int>(s.Int("core", 0, 100));
      share.reclaimed_core = static_cast<int>(s.Int("reclaimedCore", 0, 100));
      share.memory_mib = s.Int("memoryMiB", 0);
      ca.cards.push_back(std::move(share));
    }
    out.containers.push_back(std::move(ca));
  }
  if (!error.empty()) return Error{"gpu assignment: " + error};
  return out;
}

std::string EncodeAssumeTime(int64_t unix_ns) { return std::to_string(unix_ns); }

Result<int64_t> DecodeAssumeTime(std::string_view text) {
  if (text.size() > 32)  // not echoed: a sentence stays a sentence
    return Error{"gpu-assume-time is " + std::to_string(text.size()) +
                 " characters long, not unix nanoseconds"};
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
    return Error{"gpu-assume-time \"" + std::string(text) + "\" is not unix nanoseconds"};
  }
  return v;
}

}  // namespace mgpu
