#include "extender/wire.h"

#include <simdjson.h>
#include <strings.h>

#include "common/json_depth.h"

namespace mgpu::extender {
namespace {

namespace od = simdjson::ondemand;
using nlohmann::json;

bool SameKey(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// metadata.name of one Node object, `padding` bytes of readable memory following its text.
std::string NodeNameOf(od::parser& parser, std::string_view item, size_t padding) {
  od::document doc = parser.iterate(item.data(), item.size(), item.size() + padding);
  for (auto field : doc.get_object()) {
    if (!SameKey(field.unescaped_key(), "metadata")) continue;
    for (auto meta : field.value().get_object()) {
      if (SameKey(meta.unescaped_key(), "name"))
        return std::string(std::string_view(meta.value().get_string()));
    }
  }
  throw simdjson::simdjson_error(simdjson::NO_SUCH_FIELD);
}

std::string TooDeep(std::string_view what) {
  return std::string(what) + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
}

json ParseJson(std::string_view body, std::string_view what) {
  if (!JsonDepthWithin(body)) throw std::invalid_argument(TooDeep(what));
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::invalid_argument(std::string(what) + " is not valid JSON");
  if (!j.is_object()) throw std::invalid_argument(std::string(what) + " is not a JSON object");
  return j;
}

std::string StringOf(const json& object, std::string_view key, std::string_view what) {
  const json* v = FieldAnyCase(object, key);
  if (!v || v->is_null()) return "";
  if (!v->is_string())
    throw std::invalid_argument(std::string(what) + "." + std::string(key) + " is not a string");
  return v->get<std::string>();
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t plain = 0;  // start of the run of characters that need no escape
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c != '"' && c != '\\' && c >= 0x20) continue;
    out.append(text.data() + plain, i - plain);
    plain = i + 1;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out.append(text.data() + plain, text.size() - plain);
  out += '"';
}

void AppendReason(std::string& out, std::string_view text) {
  static constexpr std::string_view kFullwidthPercent = "\xef\xbc\x85";
  if (text.find('%') == std::string_view::npos) return AppendJsonString(out, text);
  std::string safe;
  safe.reserve(text.size() + 8);
  for (const char c : text) {
    if (c == '%') {
      safe += kFullwidthPercent;
    } else {
      safe += c;
    }
  }
  AppendJsonString(out, safe);
}

const json* FieldAnyCase(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto exact = object.find(std::string(key));
  if (exact != object.end()) return &*exact;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (SameKey(it.key(), key)) return &it.value();
  }
  return nullptr;
}

Result<ExtenderArgs> ExtenderArgs::Parse(std::string_view body, const PodReader& read) {
  if (!JsonDepthWithin(body)) return Error{TooDeep("ExtenderArgs")};
  ExtenderArgs args;
  args.buffer_ = std::make_shared<std::string>();
  args.buffer_->reserve(body.size() + simdjson::SIMDJSON_PADDING);
  args.buffer_->assign(body);
  const char* end_of_buffer = args.buffer_->data() + args.buffer_->capacity();
  // The parsers live for this request only: a parser keeps buffers of about six times the largest document
  // it read, and one per worker thread (thread_local) held that for each of the server's 256 threads - about
  // 20 MB of heap after a few hundred choose calls of 1,000 node names, which never came back
  // (bench/RESULTS.md section 5). Allocating them per request costs one malloc of each buffer.
  od::parser parser, node_parser;
  nlohmann::json pod_object;
  bool have_pod = false;
  try {
    od::document doc = parser.iterate(args.buffer_->data(), args.buffer_->size(), args.buffer_->capacity());
    for (auto field : doc.get_object()) {
      const std::string_view key = field.unescaped_key();
      od::value value = field.value();
      if (SameKey(key, "Pod")) {
        od::object pod = value.get_object();
        pod_object = ParseJson(std::string_view(pod.raw_json()), "ExtenderArgs.Pod");
        have_pod = true;
      } else if (SameKey(key, "NodeNames")) {
        if (value.is_null()) continue;
        if (args.full_nodes) continue;  // `Nodes` came first and wins
        for (auto name : value.get_array()) args.node_names.emplace_back(std::string_view(name.get_string()));
      } else if (SameKey(key, "Nodes")) {
        if (value.is_null()) continue;
        args.full_nodes = true;
        args.node_names.clear();
        for (auto list_field : value.get_object()) {
          if (!SameKey(list_field.unescaped_key(), "items")) continue;
          od::value items = list_field.value();
          if (items.is_null()) continue;
          for (auto item : items.get_array()) {
            od::object node = item.get_object();
            const std::string_view raw = node.raw_json();
            const size_t padding = static_cast<size_t>(end_of_buffer - (raw.data() + raw.size()));
            args.node_names.push_back(NodeNameOf(node_parser, raw, padding));
            args.node_items.push_back(raw);
          }
        }
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    return Error{std::string("ExtenderArgs is malformed: ") + e.what()};
  } catch (const std::invalid_argument& e) {
    return Error{e.what()};
  }
  if (!have_pod) return Error{"ExtenderArgs has no Pod"};
  if (args.node_names.size() > kMaxNodeNames)
    return Error{"ExtenderArgs names " + std::to_string(args.node_names.size()) + " nodes, more than the " +
                 std::to_string(kMaxNodeNames) + " mgpu-scheduler-extender takes"};
  args.pod = read(pod_object);
  return args;
}

std::string EncodeFilterResult(const ExtenderArgs& args, const FilterResult& result) {
  std::string out;
  if (args.full_nodes) {
    size_t bytes = 128;
    for (size_t i : result.passed) bytes += args.node_items[i].size() + 1;
    out.reserve(bytes);
    out = R"({"Nodes":{"metadata":{},"items":[)";
    for (size_t i = 0; i < result.passed.size(); ++i) {
      if (i) out += ',';
      out += args.node_items[result.passed[i]];
    }
    out += "]}";
  } else {
    out.reserve(64 + result.passed.size() * 24);
    out = "{\"NodeNames\":[";
    for (size_t i = 0; i < result.passed.size(); ++i) {
      if (i) out += ',';
      AppendJsonString(out, args.node_names[result.passed[i]]);
    }
    out += ']';
  }
  // What is empty is left out (kube-scheduler decodes an absent field as empty): choose's answer is one
  // node name.
  const auto append_map = [&out](const char* key, const std::map<std::string, std::string>& map) {
    if (map.empty()) return;
    out += key;
    char separator = '{';
    for (const auto& [node, reason] : map) {
      out += separator;
      separator = ',';
      AppendJsonString(out, node);
      out += ':';
      AppendReason(out, reason);
    }
    out += '}';
  };
  append_map(",\"FailedNodes\":", result.failed);
  append_map(",\"FailedAndUnresolvableNodes\":", result.unresolvable);
  if (!result.error.empty()) {
    out += ",\"Error\":";
    AppendReason(out, result.error);
  }
  out += '}';
  return out;
}

std::string EncodePrioritizeResult(const std::vector<HostScore>& scores) {
  std::string out;
  out.reserve(2 + scores.size() * 40);
  out += '[';
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i) out += ',';
    out += "{\"Host\":";
    AppendJsonString(out, scores[i].host);
    out += ",\"Score\":";
    out += std::to_string(scores[i].score);
    out += '}';
  }
  out += ']';
  return out;
}

std::string EncodeError(std::string_view error) {
  std::string out = "{\"Error\":";
  AppendReason(out, error);
  out += '}';
  return out;
}

Result<BindArgs> BindArgs::Parse(std::string_view body) {
  try {
    const json j = ParseJson(body, "ExtenderBindingArgs");
    BindArgs args{StringOf(j, "PodName", "ExtenderBindingArgs"),
                  StringOf(j, "PodNamespace", "ExtenderBindingArgs"),
                  StringOf(j, "PodUID", "ExtenderBindingArgs"), StringOf(j, "Node", "ExtenderBindingArgs")};
    if (args.pod_name.empty() || args.node.empty())
      return Error{"ExtenderBindingArgs needs PodName and Node"};
    if (args.pod_namespace.empty()) args.pod_namespace = "default";
    return args;
  } catch (const std::invalid_argument& e) {
    return Error{e.what()};
  }
}

Result<PreemptArgs> PreemptArgs::Parse(std::string_view body, const PodReader& read) {
  try {
    json j = ParseJson(body, "ExtenderPreemptionArgs");
    PreemptArgs args;
    const json* pod = FieldAnyCase(j, "Pod");
    if (!pod || !pod->is_object()) return Error{"ExtenderPreemptionArgs has no Pod object"};
    args.pod = read(*pod);
    const json* meta = FieldAnyCase(j, "NodeNameToMetaVictims");
    const json* full = FieldAnyCase(j, "NodeNameToVictims");
    const bool use_meta = meta && !meta->is_null();
    const json* victims = use_meta ? meta : full;
    if (!victims || victims->is_null()) return args;
    if (!victims->is_object()) return Error{"ExtenderPreemptionArgs victims are not an object of nodes"};
    for (const auto& [node, v] : victims->items()) {
      if (!v.is_object())
        return Error{"ExtenderPreemptionArgs victims of node " + node + " are not an object"};
      MetaVictims mv;
      const json* pods = FieldAnyCase(v, "Pods");
      if (pods && !pods->is_null()) {
        if (!pods->is_array())
          return Error{"ExtenderPreemptionArgs victims of node " + node + ": Pods is not a list"};
        for (const json& p : *pods) {
          std::string uid;
          if (use_meta) {
            uid = StringOf(p, "UID", "victim");
          } else if (const json* m = FieldAnyCase(p, "metadata")) {
            uid = StringOf(*m, "uid", "victim.metadata");
          }
          if (uid.empty())
            return Error{"ExtenderPreemptionArgs names a victim on node " + node + " with no UID"};
          mv.pod_uids.push_back(std::move(uid));
        }
      }
      const json* pdb = FieldAnyCase(v, "NumPDBViolations");
      if (pdb && !pdb->is_null()) {
        if (!pdb->is_number_integer())
          return Error{"ExtenderPreemptionArgs NumPDBViolations is not an integer"};
        mv.num_pdb_violations = pdb->get<int64_t>();
      }
      args.victims.emplace(node, std::move(mv));
    }
    return args;
  } catch (const std::invalid_argument& e) {
    return Error{e.what()};
  }
}

std::string EncodePreemptResult(const std::map<std::string, MetaVictims>& victims) {
  json nodes = json::object();
  for (const auto& [node, v] : victims) {
    json pods = json::array();
    for (const std::string& uid : v.pod_uids) pods.push_back({{"UID", uid}});
    nodes[node] = {{"Pods", pods}, {"NumPDBViolations", v.num_pdb_violations}};
  }
  return json{{"NodeNameToMetaVictims", nodes}}.dump();
}

}  // namespace mgpu::extender
