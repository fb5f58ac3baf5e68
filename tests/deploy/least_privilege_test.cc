// Least privilege, checked: the RBAC of each daemon in deploy/ (the DRA mode's in deploy/dra/) grants exactly
// the API calls its api_calls.h lists (nothing granted unused, nothing used ungranted), and
// mgpu-scheduler-extender, run against the fake API server through everything it does (informers, filter,
// bind after a conflict, inherited annotations, leader election, events), makes no call its list lacks and
// every call it lists.
#include <gtest/gtest.h>
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_objects.h"
#include "deviceplugin/api_calls.h"
#include "dra/api_calls.h"
#include "dra/daemon.h"
#include "extender/api_calls.h"
#include "extender/daemon.h"
#include "node/static_backend.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu {
namespace {

using nlohmann::json;

struct Call {
  std::string group, resource, verb;
  auto operator<=>(const Call&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Call& c) {
  return out << (c.group.empty() ? "core" : c.group) << " " << c.resource << " " << c.verb;
}

std::set<Call> Listed(const auto& calls) {
  std::set<Call> out;
  for (const kube::ApiCall& c : calls)
    out.insert({std::string(c.group), std::string(c.resource), std::string(c.verb)});
  return out;
}

// Every (group, resource, verb) the Roles and ClusterRoles of `file` grant.
std::set<Call> Granted(const std::string& file) {
  std::set<Call> out;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(std::string(MGPU_SOURCE_DIR) + "/deploy/" + file)) {
    const std::string kind = doc["kind"].as<std::string>();
    if (kind != "Role" && kind != "ClusterRole") continue;
    for (const YAML::Node& rule : doc["rules"])
      for (const YAML::Node& group : rule["apiGroups"])
        for (const YAML::Node& resource : rule["resources"])
          for (const YAML::Node& verb : rule["verbs"])
            out.insert({group.as<std::string>(), resource.as<std::string>(), verb.as<std::string>()});
  }
  return out;
}

// The RBAC name of one REST request: /api/v1/... or /apis/<group>/<version>/..., an optional
// namespaces/<ns>/, the resource, its name, a subresource.
Call CallOf(const testing::RecordedRequest& r) {
  std::vector<std::string> parts;
  std::stringstream path(r.path.substr(0, r.path.find('?')));
  for (std::string part; std::getline(path, part, '/');)
    if (!part.empty()) parts.push_back(part);
  Call call;
  size_t i = 2;  // past "api", "v1"
  if (!parts.empty() && parts[0] == "apis") {
    call.group = parts.size() > 1 ? parts[1] : "";
    i = 3;
  }
  if (i + 2 < parts.size() && parts[i] == "namespaces") i += 2;
  call.resource = i < parts.size() ? parts[i] : "";
  const bool named = i + 1 < parts.size();
  if (i + 2 < parts.size()) call.resource += "/" + parts[i + 2];
  if (r.method == "GET") call.verb = named ? "get" : r.watch ? "watch" : "list";
  if (r.method == "POST") call.verb = "create";
  if (r.method == "PUT") call.verb = "update";
  if (r.method == "PATCH") call.verb = "patch";
  if (r.method == "DELETE") call.verb = named ? "delete" : "deletecollection";
  return call;
}

TEST(LeastPrivilege, EachDaemonsRbacGrantsExactlyTheCallsItLists) {
  EXPECT_EQ(Granted("extender/rbac.yaml"), Listed(extender::kApiCalls));
  EXPECT_EQ(Granted("deviceplugin/rbac.yaml"), Listed(dp::kApiCalls));
  // deploy/dra/: the node daemon in DRA mode, and what the extender's /mutate needs beside its own.
  std::set<Call> dra = Listed(dra::kApiCalls);
  for (const Call& c : Listed(extender::kDraApiCalls)) dra.insert(c);
  EXPECT_EQ(Granted("dra/rbac.yaml"), dra);
}

TEST(LeastPrivilege, TheExtenderMakesExactlyTheCallsItLists) {
  using namespace testobj;
  testing::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  ASSERT_TRUE(api.Create("nodes", Node("n1", 2)).ok());
  const auto owned = [](json pod, const char* api_version, const char* kind, const char* owner) {
    pod["metadata"]["ownerReferences"] =
        json::array({{{"apiVersion", api_version}, {"kind", kind}, {"name", owner}, {"controller", true}}});
    return pod;
  };
  const auto workload = [](const char* api_version, const char* kind, const char* name, json owners) {
    json object = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", {{"name", name}}}};
    if (!owners.is_null()) object["metadata"]["ownerReferences"] = owners;
    return object;
  };
  ASSERT_TRUE(api.Create("deployments", workload("apps/v1", "Deployment", "web", nullptr)).ok());
  ASSERT_TRUE(api.Create("replicasets", workload("apps/v1", "ReplicaSet", "web-1",
                                                 json::array({{{"apiVersion", "apps/v1"},
                                                               {"kind", "Deployment"},
                                                               {"name", "web"},
                                                               {"controller", true}}})))
                  .ok());
  ASSERT_TRUE(api.Create("statefulsets", workload("apps/v1", "StatefulSet", "db", nullptr)).ok());
  ASSERT_TRUE(api.Create("jobs", workload("batch/v1", "Job", "train", nullptr)).ok());
  ASSERT_TRUE(api.Create("daemonsets", workload("apps/v1", "DaemonSet", "agent", nullptr)).ok());
  const std::vector<json> pods = {owned(Pod("a", 10, 1000), "apps/v1", "ReplicaSet", "web-1"),
                                  owned(Pod("b", 10, 1000), "apps/v1", "StatefulSet", "db"),
                                  owned(Pod("c", 10, 1000), "batch/v1", "Job", "train"), Pod("d", 10, 1000),
                                  owned(Pod("e", 10, 1000), "apps/v1", "DaemonSet", "agent")};
  for (const json& pod : pods) ASSERT_TRUE(api.Create("pods", pod).ok());

  Config config;
  config.extender.listen_address = "127.0.0.1:0";
  config.extender.leader_election = true;
  config.extender.lease_namespace = "default";
  extender::Daemon daemon(config);
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  ASSERT_TRUE(daemon.Start(cluster).ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return daemon.Ready(); }));
  httplib::Client client("127.0.0.1", daemon.port());
  for (const json& pod : pods) {
    const std::string name = pod["metadata"]["name"];
    json stored = api.Get("pods", "default", name).value();
    if (name != "d") {  // d is bound without a filter first: bind reads it
      ASSERT_TRUE(
          client.Post("/filter", json{{"Pod", stored}, {"NodeNames", {"n1"}}}.dump(), "application/json"));
    }
    auto bound =
        client.Post("/bind", json{{"PodName", name}, {"PodNamespace", "default"}, {"Node", "n1"}}.dump(),
                    "application/json");
    ASSERT_TRUE(bound);
    EXPECT_EQ(json::parse(bound->body)["Error"], "") << name;
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return api.List("events", "default").size() == pods.size(); }));
  ASSERT_TRUE(testing::WaitUntil([&] {  // the claim informer, started once its probe could list
    for (const testing::RecordedRequest& r : api.requests())
      if (r.watch && r.path.find("/resourceclaims") != std::string::npos) return true;
    return false;
  }));
  daemon.Stop();  // releases the lease: an update

  std::set<Call> made;
  for (const testing::RecordedRequest& r : api.requests()) made.insert(CallOf(r));
  // Its own calls, and the claim informer's from kDraApiCalls (this API server serves ResourceClaims; no
  // webhook is called here).
  std::set<Call> listed = Listed(extender::kApiCalls);
  for (const Call& c : Listed(extender::kDraApiCalls))
    if (c.resource == "resourceclaims" && c.verb != "get") listed.insert(c);
  EXPECT_EQ(made, listed);
}

// The node daemon in DRA mode, through its start, a slice the kubelet deletes (published again), a health
// change (the pool rewritten) and a claim prepared: exactly the calls dra/api_calls.h lists.
TEST(LeastPrivilege, TheDraDriverMakesExactlyTheCallsItLists) {
  testing::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  ASSERT_TRUE(api.Create("nodes", {{"metadata", {{"name", "n1"}}}}).ok());
  // A slice left from an earlier layout, which the driver deletes.
  ASSERT_TRUE(api.Create("resourceslices",
                         {{"metadata", {{"name", "n1-mgpu.io-devices-9"}}},
                          {"spec",
                           {{"driver", "mgpu.io"},
                            {"nodeName", "n1"},
                            {"pool", {{"name", "n1"}, {"generation", 1}, {"resourceSliceCount", 1}}}}}})
                  .ok());
  testing::TempDir dir;
  Config config;
  config.isolation.backend = IsolationBackend::kNone;
  config.dra.kubelet_root_dir = dir.path() + "/kubelet";
  config.dra.cdi_directory = dir.path() + "/cdi";
  config.dra.state_directory = dir.path() + "/state";
  auto owned =
      std::make_unique<node::StaticBackend>(std::vector<Card>{{0, "GPU-a", "NVIDIA A10", 24576, true}});
  node::StaticBackend* backend = owned.get();
  dra::Daemon daemon(config, "n1", std::move(owned));
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  ASSERT_TRUE(daemon.Start(cluster).ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return daemon.publisher()->UpToDate(); }));
  ASSERT_TRUE(api.Delete("resourceslices", "", "n1-mgpu.io-devices-0").ok());
  // Published again: the default layout's one slice of devices.
  ASSERT_TRUE(testing::WaitUntil([&] { return api.List("resourceslices").size() == 1; }));
  backend->SetHealthy("GPU-a", false);
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto s = api.Get("resourceslices", "", "n1-mgpu.io-devices-0");
    return s && (*s)["spec"]["devices"][0].contains("taints");
  }));
  backend->SetHealthy("GPU-a", true);
  json claim = {
      {"metadata", {{"name", "c"}, {"namespace", "default"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results", json::array({{{"request", "gpu"},
                                      {"driver", "mgpu.io"},
                                      {"pool", "n1"},
                                      {"device", "gpu-0-fixed"},
                                      {"consumedCapacity", {{"cores", "30"}, {"memory", "1Gi"}}}}})}}}}}}}};
  auto created = api.Create("resourceclaims", claim);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto s = api.Get("resourceslices", "", "n1-mgpu.io-devices-0");
    return s && !(*s)["spec"]["devices"][0].contains("taints");
  }));
  const std::string uid = (*created)["metadata"]["uid"];
  EXPECT_EQ(daemon.preparer()->Prepare({"default", uid, "c"}).error, "");
  daemon.Stop();

  std::set<Call> made;
  for (const testing::RecordedRequest& r : api.requests()) made.insert(CallOf(r));
  EXPECT_EQ(made, Listed(dra::kApiCalls));
}

}  // namespace
}  // namespace mgpu
