#include "testing/workloads.h"

#include <functional>
#include <map>

#include "common/manifest.h"
#include "common/request.h"

namespace mgpu::testing {
namespace {

// The plural the fake API server stores a kind under.
const std::map<std::string, std::string, std::less<>> kPlurals = {{"Deployment", "deployments"},
                                                                  {"ReplicaSet", "replicasets"},
                                                                  {"StatefulSet", "statefulsets"},
                                                                  {"Job", "jobs"}};

Json OwnerReference(const Json& owner) {
  return {{"apiVersion", owner["apiVersion"]}, {"kind", owner["kind"]}, {"name", owner["metadata"]["name"]},
          {"uid", owner["metadata"]["uid"]},   {"controller", true},    {"blockOwnerDeletion", true}};
}

std::string KeyOf(const Json& object) {
  return object["metadata"].value("namespace", "default") + "/" + object["metadata"].value("name", "");
}

}  // namespace

Result<std::vector<std::string>> CreateWorkloads(FakeApiServer& api, std::string_view yaml_text,
                                                 const Config& config) {
  Result<std::vector<ManifestPod>> pods = PodsOfManifests(yaml_text);
  if (!pods.ok()) return pods.error();
  std::map<std::string, Json> controllers;  // "Kind ns/name" → the object the pods are owned by
  std::vector<std::string> keys;
  for (ManifestPod& m : *pods) {
    if (!m.owner.is_null()) {
      const std::string kind = m.owner.value("kind", "");
      const std::string owner_id = kind + " " + KeyOf(m.owner);
      auto it = controllers.find(owner_id);
      if (it == controllers.end()) {
        Json owner = m.owner;
        owner["metadata"]["namespace"] = m.pod["metadata"]["namespace"];
        Result<Json> created = api.Create(kPlurals.at(kind), owner);
        if (!created.ok()) return Error{"cannot create " + owner_id + ": " + created.message()};
        Json controller = *created;
        if (kind == "Deployment") {
          // The Deployment controller's ReplicaSet, named after the template's hash.
          const std::string hash =
              std::to_string(std::hash<std::string>()(owner["spec"]["template"].dump()) % 100000);
          Json rs = {{"apiVersion", "apps/v1"},
                     {"kind", "ReplicaSet"},
                     {"metadata",
                      {{"name", owner["metadata"]["name"].get<std::string>() + "-" + hash},
                       {"namespace", owner["metadata"]["namespace"]},
                       {"annotations", owner["metadata"].value("annotations", Json::object())},
                       {"ownerReferences", Json::array({OwnerReference(controller)})}}},
                     {"spec", owner["spec"]}};
          Result<Json> replica_set = api.Create("replicasets", rs);
          if (!replica_set.ok())
            return Error{"cannot create the ReplicaSet of " + owner_id + ": " + replica_set.message()};
          controller = *replica_set;
        }
        it = controllers.emplace(owner_id, controller).first;
      }
      // Json::array: `= {x}` of one json is a copy of x with clang, an array with gcc.
      m.pod["metadata"]["ownerReferences"] = Json::array({OwnerReference(it->second)});
    }
    m.pod["apiVersion"] = "v1";
    m.pod["kind"] = "Pod";
    if (!m.pod["spec"].contains("schedulerName")) m.pod["spec"]["schedulerName"] = "default-scheduler";
    m.pod["status"] = {{"phase", "Pending"}};
    m.pod = m.pod.patch(MemoryRewriteOf(m.pod, config, m.workload));
    Result<Json> created = api.Create("pods", m.pod);
    if (!created.ok()) return Error{"cannot create pod " + KeyOf(m.pod) + ": " + created.message()};
    keys.push_back(KeyOf(*created));
  }
  return keys;
}

}  // namespace mgpu::testing
