#include "common/request.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/json_path.h"
#include "common/quantity.h"

namespace mgpu {
namespace {

using nlohmann::json;

constexpr int64_t kMaxCardCount = 128;
constexpr int64_t kMaxMemoryUnits = int64_t{1} << 40;

const json* Field(const json& object, const char* key) { return FindPath(object, {key}); }

const json* FindPhase(const json& pod) {
  const json* status = Field(pod, "status");
  return status ? Field(*status, "phase") : nullptr;
}

std::string StringField(const json& object, const char* key) { return StringAt(object, {key}); }

// One container's three mgpu quantities (0 = not asked for).
struct Asked {
  int64_t core = 0;
  int64_t reclaimed_core = 0;
  int64_t memory_units = 0;
  bool Any() const { return core > 0 || reclaimed_core > 0 || memory_units > 0; }
};

class Parser {
 public:
  Parser(const json& pod, const Config& config, const Annotations& workload, WorkloadSource* source,
         MemoryCount memory_count)
      : pod_(pod),
        config_(config),
        names_(config.Names()),
        workload_(workload),
        source_(source),
        memory_count_(memory_count) {
    const json* meta = Field(pod, "metadata");
    if (meta) {
      key_ = PodKey(StringField(*meta, "namespace"), StringField(*meta, "name"));
      own_ = AnnotationsOf(pod);
    }
  }

  Result<PodRequest> Parse() {
    if (!pod_.is_object()) return Error{"the pod is not a JSON object"};
    PodRequest req;
    if (const json* meta = Field(pod_, "metadata")) {
      req.namespace_name = StringField(*meta, "namespace");
      req.name = StringField(*meta, "name");
      req.uid = StringField(*meta, "uid");
    }

    // Read every container's quantities first: the QoS default depends on all of them.
    struct Named {
      std::string name;
      bool init;
      Asked asked;
    };
    std::vector<Named> asked;
    const json* spec = Field(pod_, "spec");
    for (const auto& [list, init] : {std::pair{"initContainers", true}, std::pair{"containers", false}}) {
      const json* containers = spec ? Field(*spec, list) : nullptr;
      if (!containers) continue;
      if (!containers->is_array()) return Fail("spec." + std::string(list) + " is not a list");
      for (const json& c : *containers) {
        const std::string name = StringField(c, "name");
        auto a = ReadAsked(c, name);
        if (!a.ok()) return a.error();
        if (a->Any()) asked.push_back({name, init, *a});
      }
    }
    const HostRequest host = HostRequestOf(pod_);
    req.cpu_milli = host.cpu_milli;
    req.host_memory_mib = host.memory_mib;
    req.gpu_models = GpuModelsOf(pod_, names_.label_product);
    if (asked.empty()) return req;

    bool any_reclaimed = false;
    for (const auto& n : asked) any_reclaimed |= n.asked.reclaimed_core > 0;
    if (auto s = ReadQos(req, any_reclaimed); !s.ok()) return Error{s.message()};
    if (auto s = ReadPolicies(req); !s.ok()) return Error{s.message()};
    std::optional<int64_t> gpu_count;
    if (auto v = Lookup(names_.gpu_count)) {
      auto n = ParseWholeQuantity(*v);
      if (!n.ok() || *n < 1 || *n > kMaxCardCount) {
        return Fail(names_.gpu_count + " \"" + *v + "\" is not a whole number from 1 to " +
                    std::to_string(kMaxCardCount));
      }
      gpu_count = *n;
    }
    for (const auto& n : asked) {
      auto c = Validate(req, n.name, n.asked, gpu_count);
      if (!c.ok()) return c.error();
      c->init = n.init;
      req.containers.push_back(std::move(*c));
    }
    return req;
  }

 private:
  Error Fail(const std::string& what) const { return Error{"pod " + key_ + ": " + what}; }
  Error Fail(const std::string& container, const std::string& what) const {
    return Error{"pod " + key_ + " container " + container + ": " + what};
  }

  std::optional<std::string> Lookup(const std::string& key) {
    if (auto it = own_.find(key); it != own_.end()) return it->second;
    const Annotations& workload = Workload();
    if (auto it = workload.find(key); it != workload.end()) return it->second;
    return std::nullopt;
  }

  // The workload's annotations: given, or asked of the source once, when first read.
  const Annotations& Workload() {
    if (!source_) return workload_;
    if (!fetched_) {
      fetched_.emplace();
      if (std::optional<OwnerRef> owner = ControllerOf(pod_)) {
        const json* meta = Field(pod_, "metadata");
        *fetched_ =
            source_->AnnotationsOf(StringField(*meta, "namespace"), StringField(*meta, "name"), *owner);
      }
    }
    return *fetched_;
  }

  // limits and requests of one resource: requests default to limits; both given must be equal.
  Result<int64_t> ReadQuantity(const json& resources, const std::string& resource,
                               const std::string& container) {
    std::optional<int64_t> values[2];
    const char* kinds[2] = {"limits", "requests"};
    for (int i = 0; i < 2; ++i) {
      const json* list = Field(resources, kinds[i]);
      const json* v = list ? Field(*list, resource.c_str()) : nullptr;
      if (!v) continue;
      auto q = ParseQuantityJson(*v);
      if (!q.ok()) return Fail(container, std::string(kinds[i]) + " of " + resource + ": " + q.message());
      values[i] = *q;
    }
    if (values[0] && values[1] && *values[0] != *values[1]) {
      return Fail(container, "requests (" + std::to_string(*values[1]) + ") and limits (" +
                                 std::to_string(*values[0]) + ") of " + resource +
                                 " differ; extended resources need them equal");
    }
    return values[0] ? *values[0] : values[1].value_or(0);
  }

  Result<Asked> ReadAsked(const json& container, const std::string& name) {
    Asked a;
    const json* resources = Field(container, "resources");
    if (!resources) return a;
    for (auto [resource, out] :
         {std::pair{&names_.core, &a.core}, std::pair{&names_.reclaimed_core, &a.reclaimed_core},
          std::pair{&names_.memory, &a.memory_units}}) {
      auto q = ReadQuantity(*resources, *resource, name);
      if (!q.ok()) return q.error();
      *out = *q;
    }
    return a;
  }

  Status ReadQos(PodRequest& req, bool any_reclaimed) {
    auto qos = Lookup(std::string(kQosLevelAnnotation));
    if (!qos) {
      req.qos = any_reclaimed ? Qos::kOffline : Qos::kOnline;
    } else if (*qos == "shared_cores") {
      req.qos = Qos::kOnline;
    } else if (*qos == "reclaimed_cores") {
      req.qos = Qos::kOffline;
    } else if (*qos == "dedicated_cores") {
      req.qos = Qos::kOnline;
      req.dedicated = true;
    } else {
      return Fail(std::string(kQosLevelAnnotation) + " \"" + *qos +
                  "\" is not one of shared_cores, reclaimed_cores, dedicated_cores");
    }
    qos_text_ = qos ? *qos + " (" + std::string(Name(req.qos)) + ")" : std::string(Name(req.qos));
    return Status::Ok();
  }

  Status ReadPolicies(PodRequest& req) {
    req.compute_policy = config_.default_compute_policy;
    req.card_policy = config_.default_card_policy;
    req.node_policy = config_.default_node_policy;
    if (auto v = Lookup(names_.compute_policy)) {
      auto p = ParseComputePolicy(*v);
      if (!p) {
        return Fail(names_.compute_policy + " \"" + *v +
                    "\" is not one of fixed-share, guaranteed-burst-share, native-burst-share");
      }
      req.compute_policy = *p;
    }
    if (auto v = Lookup(names_.gpu_policy)) {
      auto p = ParseCardPolicy(*v);
      if (!p) return Fail(names_.gpu_policy + " \"" + *v + "\" is not one of binpack, spread, fragmentation");
      req.card_policy = *p;
    }
    if (auto v = Lookup(names_.node_policy)) {
      auto p = ParseNodePolicy(*v);
      if (!p)
        return Fail(names_.node_policy + " \"" + *v + "\" is not one of binpack, spread, fragmentation");
      req.node_policy = *p;
    }
    if (req.qos == Qos::kOffline && req.compute_policy == ComputePolicy::kNativeBurstShare) {
      return Fail("offline pods share a card only under fixed-share or guaranteed-burst-share, but " +
                  names_.compute_policy + " is native-burst-share");
    }
    return Status::Ok();
  }

  Result<ContainerRequest> Validate(const PodRequest& req, const std::string& name, const Asked& a,
                                    std::optional<int64_t> gpu_count) {
    const std::string& core = names_.core;
    const std::string& memory = names_.memory;
    const std::string& reclaimed = names_.reclaimed_core;
    ContainerRequest c;
    c.name = name;
    if (a.memory_units > kMaxMemoryUnits) {
      return Fail(name, memory + " " + std::to_string(a.memory_units) + " is larger than any card");
    }
    c.memory_mib = MemoryMiB(a.memory_units, 1);
    if (req.qos == Qos::kOffline) {
      if (a.core > 0)
        return Fail(name, "an offline pod must not ask for " + core + " (it uses " + reclaimed + ")");
      if (a.reclaimed_core == 0)
        return Fail(name, reclaimed + " is required with " + memory + " for an offline pod");
      if (a.memory_units == 0) return Fail(name, memory + " is required with " + reclaimed);
      if (gpu_count && *gpu_count != 1) {
        return Fail(
            name, "offline pods use one card, but " + names_.gpu_count + " is " + std::to_string(*gpu_count));
      }
      if (a.reclaimed_core > 100) {
        return Fail(name, reclaimed + " " + std::to_string(a.reclaimed_core) +
                              " is above 100 (offline pods use one card)");
      }
      if (a.reclaimed_core < config_.min_core_percent) {
        return Fail(name, reclaimed + " " + std::to_string(a.reclaimed_core) + " is below the minimum of " +
                              std::to_string(config_.min_core_percent) + " (minCorePercent)");
      }
      c.reclaimed_core = static_cast<int>(a.reclaimed_core);
      c.card_count = 1;
      return c;
    }
    if (a.reclaimed_core > 0) {
      return Fail(name, reclaimed + " is for offline pods, but this pod is " + qos_text_);
    }
    if (a.core == 0) return Fail(name, core + " is required with " + memory + " for an online pod");
    if (a.memory_units == 0) return Fail(name, memory + " is required with " + core);
    if (a.core > 100 * kMaxCardCount)
      return Fail(name, core + " " + std::to_string(a.core) + " is too large");
    int64_t n = 1;
    if (gpu_count) {
      n = *gpu_count;
    } else if (a.core > 100) {
      if (a.core % 100 != 0) {
        return Fail(name, core + " " + std::to_string(a.core) +
                              " is above 100, so it must be a multiple of 100 (whole cards) or come with " +
                              names_.gpu_count);
      }
      n = a.core / 100;
    }
    const std::string over = " does not divide evenly over " + std::to_string(n) + " cards";
    if (a.core % n != 0) return Fail(name, core + " " + std::to_string(a.core) + over);
    if (a.memory_units % n != 0) return Fail(name, memory + " " + std::to_string(a.memory_units) + over);
    c.memory_mib = MemoryMiB(a.memory_units, n);
    const int64_t per_card = a.core / n;
    const std::string per = n > 1 ? " per card" : "";
    if (per_card > 100) return Fail(name, core + " " + std::to_string(per_card) + per + " is above 100");
    if (per_card < config_.min_core_percent) {
      return Fail(name, core + " " + std::to_string(per_card) + per + " is below the minimum of " +
                            std::to_string(config_.min_core_percent) + " (minCorePercent)");
    }
    if (req.dedicated && per_card != 100) {
      return Fail(name, "dedicated_cores pods take whole cards, so " + core + per + " must be 100, got " +
                            std::to_string(per_card));
    }
    c.core = static_cast<int>(a.core);
    c.card_count = static_cast<int>(n);
    return c;
  }

  // The MiB that `amount` of mgpu-memory over `cards` cards holds: devices times the unit, or MiB as
  // written with each card's part rounded up to whole devices.
  int64_t MemoryMiB(int64_t amount, int64_t cards) const {
    const int64_t unit = std::max<int64_t>(1, config_.memory_unit_mib);
    if (memory_count_ == MemoryCount::kDevices) return amount * unit;
    return (amount / cards + unit - 1) / unit * unit * cards;
  }

  const json& pod_;
  const Config& config_;
  const ResourceNames names_;
  const Annotations& workload_;
  WorkloadSource* const source_;
  const MemoryCount memory_count_;
  std::optional<Annotations> fetched_;
  Annotations own_;
  std::string key_ = "/";
  std::string qos_text_;
};

// CPU (millicores) and memory (MiB) in a resource list; unreadable quantities count 0 (the API server
// validated them).
HostRequest HostOf(const json* list) {
  HostRequest out;
  if (!list) return out;
  for (auto [name, unit, value] : {std::tuple{"cpu", QuantityUnit::kMilli, &out.cpu_milli},
                                   std::tuple{"memory", QuantityUnit::kMebi, &out.memory_mib}}) {
    const json* q = Field(*list, name);
    if (!q) continue;
    if (Result<int64_t> v = ParseQuantityJson(*q, unit); v.ok()) *value = *v;
  }
  return out;
}

// A container's: its requests, else its limits (the API server defaults one from the other).
HostRequest ContainerHost(const json& container) {
  const json* resources = Field(container, "resources");
  if (!resources) return {};
  const json* requests = Field(*resources, "requests");
  const json* limits = Field(*resources, "limits");
  HostRequest r = HostOf(requests), l = HostOf(limits);
  if (!requests || !Field(*requests, "cpu")) r.cpu_milli = l.cpu_milli;
  if (!requests || !Field(*requests, "memory")) r.memory_mib = l.memory_mib;
  return r;
}

}  // namespace

HostRequest HostRequestOf(const json& pod) {
  // kube-scheduler's effective request: containers and sidecars (restartable init containers) add up; an
  // init container runs beside the sidecars started before it, and the largest such moment counts if
  // larger; the overhead comes on top.
  const json* spec = Field(pod, "spec");
  HostRequest sum, peak, sidecars;
  const auto add = [](HostRequest& a, const HostRequest& b) {
    a.cpu_milli += b.cpu_milli;
    a.memory_mib += b.memory_mib;
  };
  if (const json* inits = spec ? Field(*spec, "initContainers") : nullptr; inits && inits->is_array()) {
    for (const json& c : *inits) {
      const HostRequest r = ContainerHost(c);
      if (StringField(c, "restartPolicy") == "Always") {
        add(sidecars, r);
      } else {
        peak.cpu_milli = std::max(peak.cpu_milli, r.cpu_milli + sidecars.cpu_milli);
        peak.memory_mib = std::max(peak.memory_mib, r.memory_mib + sidecars.memory_mib);
      }
    }
  }
  if (const json* containers = spec ? Field(*spec, "containers") : nullptr;
      containers && containers->is_array()) {
    for (const json& c : *containers) add(sum, ContainerHost(c));
  }
  add(sum, sidecars);
  sum.cpu_milli = std::max(sum.cpu_milli, peak.cpu_milli);
  sum.memory_mib = std::max(sum.memory_mib, peak.memory_mib);
  add(sum, HostOf(spec ? Field(*spec, "overhead") : nullptr));
  return sum;
}

std::vector<std::string> GpuModelsOf(const json& pod, const std::string& label) {
  const json* spec = Field(pod, "spec");
  std::vector<std::string> selected;  // from nodeSelector: one value, or none
  bool any_selected = true;
  if (const json* selector = spec ? Field(*spec, "nodeSelector") : nullptr) {
    if (const json* v = Field(*selector, label.c_str()); v && v->is_string()) {
      selected = {v->get<std::string>()};
      any_selected = false;
    }
  }
  // Required node affinity: terms are alternatives; a term without an In expression on the label allows
  // any model.
  std::vector<std::string> affinity;
  bool any_affinity = true;
  const json* terms = spec;
  for (const char* key :
       {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"}) {
    terms = terms ? Field(*terms, key) : nullptr;
  }
  if (terms && terms->is_array() && !terms->empty()) {
    any_affinity = false;
    for (const json& term : *terms) {
      const json* expressions = Field(term, "matchExpressions");
      std::optional<std::vector<std::string>> values;
      if (expressions && expressions->is_array()) {
        for (const json& e : *expressions) {
          if (StringField(e, "key") != label || StringField(e, "operator") != "In") continue;
          const json* list = Field(e, "values");
          std::vector<std::string> v;
          if (list && list->is_array()) {
            for (const json& x : *list) {
              if (x.is_string()) v.push_back(x.get<std::string>());
            }
          }
          values = std::move(v);
        }
      }
      if (!values) {
        any_affinity = true;
        break;
      }
      affinity.insert(affinity.end(), values->begin(), values->end());
    }
  }
  std::vector<std::string> out;
  if (any_selected && any_affinity) return out;
  if (any_affinity) {
    out = std::move(selected);
  } else if (any_selected) {
    out = std::move(affinity);
  } else {
    for (const std::string& m : selected) {
      if (std::find(affinity.begin(), affinity.end(), m) != affinity.end()) out.push_back(m);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<PodRequest> ParsePodRequest(const json& pod, const Config& config, const Annotations& workload,
                                   MemoryCount memory_count) {
  return Parser(pod, config, workload, nullptr, memory_count).Parse();
}

Result<PodRequest> ParsePodRequest(const json& pod, const Config& config, WorkloadSource& workload) {
  static const Annotations kNone;
  return Parser(pod, config, kNone, &workload, MemoryCount::kDevices).Parse();
}

MemoryCount MemoryCountAtAdmission(const json& pod, const Config& config) {
  const json* written = FindPath(pod, {"metadata", "annotations", config.Names().memory_as_written.c_str()});
  return written ? MemoryCount::kDevices : MemoryCount::kMiB;
}

PodContainer FindContainer(const json& pod, const ContainerRequest& container) {
  const char* list = container.init ? "initContainers" : "containers";
  const json* containers = FindPath(pod, {"spec", list});
  if (containers == nullptr || !containers->is_array()) return {};
  for (size_t i = 0; i < containers->size(); ++i) {
    if (StringAt((*containers)[i], {"name"}) == container.name)
      return {"/spec/" + std::string(list) + "/" + std::to_string(i), &(*containers)[i]};
  }
  return {};
}

json MemoryUnitsPatch(const json& pod, const PodRequest& request, const Config& config) {
  const ResourceNames names = config.Names();
  const int64_t unit = std::max<int64_t>(1, config.memory_unit_mib);
  json patch = json::array();
  json written = json::object();
  for (const ContainerRequest& c : request.containers) {
    const PodContainer at = FindContainer(pod, c);
    if (c.memory_mib == 0 || at.object == nullptr) continue;
    for (const char* kind : {"requests", "limits"}) {  // limits win; requests alone stand for them
      const json* amount = FindPath(*at.object, {"resources", kind, names.memory.c_str()});
      if (amount == nullptr) continue;
      written[c.name] = *amount;
      patch.push_back({{"op", "replace"},
                       {"path", at.pointer + "/resources/" + kind + "/" + PointerToken(names.memory)},
                       {"value", std::to_string(c.memory_mib / unit)}});
    }
  }
  if (patch.empty()) return patch;
  if (!FindPath(pod, {"metadata", "annotations"}))
    patch.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
  patch.push_back({{"op", "add"},
                   {"path", "/metadata/annotations/" + PointerToken(names.memory_as_written)},
                   {"value", written.dump()}});
  return patch;
}

json MemoryRewriteOf(const json& pod, const Config& config, const Annotations& workload) {
  if (MemoryCountAtAdmission(pod, config) == MemoryCount::kDevices) return json::array();
  Result<PodRequest> asked = ParsePodRequest(pod, config, workload, MemoryCount::kMiB);
  return asked.ok() ? MemoryUnitsPatch(pod, *asked, config) : json::array();
}

void KeepSchedulingFields(json& pod, const Config& config) {
  if (!pod.is_object()) return;
  const auto copy = [](const json& from, json& to, std::initializer_list<const char*> keys) {
    for (const char* key : keys)
      if (const json* v = Field(from, key)) to[key] = *v;
  };
  json slim = json::object();
  if (const json* meta = Field(pod, "metadata")) {
    json& m = slim["metadata"] = json::object();
    copy(*meta, m, {"name", "namespace", "uid", "resourceVersion", "deletionTimestamp"});
    if (const json* annotations = Field(*meta, "annotations"); annotations && annotations->is_object()) {
      const std::string prefix = config.resource_domain + "/";
      json kept = json::object();
      for (const auto& [key, value] : annotations->items())
        if (key.starts_with(prefix) || key == kQosLevelAnnotation) kept[key] = value;
      if (!kept.empty()) m["annotations"] = std::move(kept);
    }
    if (const json* owners = Field(*meta, "ownerReferences"); owners && owners->is_array()) {
      for (const json& o : *owners) {
        if (const json* c = Field(o, "controller"); !c || !c->is_boolean() || !c->get<bool>()) continue;
        json& kept = m["ownerReferences"] = json::array({json::object()});
        copy(o, kept[0], {"apiVersion", "kind", "name", "controller"});
      }
    }
  }
  if (const json* spec = Field(pod, "spec")) {
    json& s = slim["spec"] = json::object();
    copy(*spec, s, {"nodeName", "nodeSelector", "overhead"});
    if (const json* required = Field(*spec, "affinity")) {
      for (const char* key : {"nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"})
        required = required ? Field(*required, key) : nullptr;
      if (required)
        s["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = *required;
    }
    for (const char* list : {"initContainers", "containers"}) {
      const json* containers = Field(*spec, list);
      if (!containers) continue;
      if (!containers->is_array()) {  // kept as it is: the rules refuse it in the same words
        s[list] = *containers;
        continue;
      }
      json& kept = s[list] = json::array();
      for (const json& c : *containers) {
        if (!c.is_object()) {
          kept.push_back(c);
          continue;
        }
        json k = json::object();
        copy(c, k, {"name", "resources", "restartPolicy"});
        kept.push_back(std::move(k));
      }
    }
  }
  if (const json* phase = FindPhase(pod)) slim["status"]["phase"] = *phase;
  if (const json* status = Field(pod, "status")) {
    if (const json* host_ip = Field(*status, "hostIP")) slim["status"]["hostIP"] = *host_ip;
  }
  pod = std::move(slim);
}

std::string PodKeyOf(const json& pod) {
  const json* meta = Field(pod, "metadata");
  return meta ? PodKey(StringField(*meta, "namespace"), StringField(*meta, "name")) : PodKey("", "");
}

Annotations AnnotationsOf(const json& object) {
  Annotations out;
  const json* meta = Field(object, "metadata");
  const json* annotations = meta ? Field(*meta, "annotations") : nullptr;
  if (!annotations || !annotations->is_object()) return out;
  for (const auto& [k, v] : annotations->items()) {
    if (v.is_string()) out.emplace(k, v.get<std::string>());
  }
  return out;
}

std::optional<OwnerRef> ControllerOf(const json& object) {
  const json* meta = Field(object, "metadata");
  const json* owners = meta ? Field(*meta, "ownerReferences") : nullptr;
  if (!owners || !owners->is_array()) return std::nullopt;
  for (const json& o : *owners) {
    const json* controller = Field(o, "controller");
    if (controller && controller->is_boolean() && controller->get<bool>()) {
      return OwnerRef{StringField(o, "apiVersion"), StringField(o, "kind"), StringField(o, "name")};
    }
  }
  return std::nullopt;
}

}  // namespace mgpu
