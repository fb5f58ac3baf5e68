// The admission webhook with AdmissionReview bodies written from the admission.k8s.io/v1 types
// (AdmissionReview{apiVersion, kind, request: AdmissionRequest{uid, kind{group, version, kind}, resource,
// namespace, name, operation, object, oldObject}}), directly and over the extender's HTTP server.
#include "extender/admission.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>

#include "extender/extender.h"
#include "extender/server.h"
#include "extender/test_admission.h"
#include "common/test_objects.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;
using testobj::Pod;

const ResourceNames kNames = Config().Names();

json Review(const std::string& group, const std::string& kind, const json& object,
            const std::string& operation = "CREATE", const json& old_object = nullptr) {
  const std::string resource = kind == "Pod" ? "pods" : [&] {
    std::string plural = kind + "s";
    for (char& c : plural) c = static_cast<char>(std::tolower(c));
    return plural;
  }();
  json request = {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
                  {"kind", {{"group", group}, {"version", "v1"}, {"kind", kind}}},
                  {"resource", {{"group", group}, {"version", "v1"}, {"resource", resource}}},
                  {"requestKind", {{"group", group}, {"version", "v1"}, {"kind", kind}}},
                  {"namespace", "team-a"},
                  {"operation", operation},
                  {"userInfo", {{"username", "admin"}, {"groups", {"system:authenticated"}}}},
                  {"object", object},
                  {"oldObject", old_object},
                  {"dryRun", false}};
  if (object.is_object() && object.contains("metadata"))
    request["name"] = object["metadata"].value("name", "");
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
}

// The AdmissionReview response, checked for the envelope every answer must carry.
json Response(const json& review, const WorkloadLookup& workload = {}) {
  const AdmissionReply reply = ReviewAdmission(review.dump(), Config(), workload);
  EXPECT_EQ(reply.status, 200) << reply.body;
  const json out = json::parse(reply.body, nullptr, false);
  EXPECT_EQ(out.value("apiVersion", ""), "admission.k8s.io/v1");
  EXPECT_EQ(out.value("kind", ""), "AdmissionReview");
  EXPECT_EQ(out["response"]["uid"], review["request"]["uid"]);
  EXPECT_TRUE(out["response"]["allowed"].is_boolean());
  return out["response"];
}

json PodIn(json pod, const std::string& ns = "team-a") {
  pod["metadata"]["namespace"] = ns;
  pod["metadata"].erase("uid");
  pod.erase("status");
  return pod;
}

// A workload of `kind` whose pod template is `pod`'s (metadata and spec).
json Workload(const std::string& kind, const std::string& name, const json& pod,
              const json& annotations = {}) {
  const json tmpl = {{"metadata", {{"labels", {{"app", name}}}}}, {"spec", pod["spec"]}};
  json object = {{"apiVersion", kind == "Job" || kind == "CronJob" ? "batch/v1" : "apps/v1"},
                 {"kind", kind},
                 {"metadata", {{"name", name}, {"namespace", "team-a"}}}};
  if (kind == "CronJob") {
    object["spec"] = {
        {"schedule", "*/5 * * * *"},
        {"jobTemplate", {{"metadata", {{"annotations", annotations}}}, {"spec", {{"template", tmpl}}}}}};
  } else {
    object["metadata"]["annotations"] = annotations;
    object["spec"] = {{"selector", {{"matchLabels", {{"app", name}}}}}, {"template", tmpl}};
  }
  return object;
}

// The sentence the filter gives `pod` for every node (after "invalid mgpu request: ", which is what
// kube-scheduler's sentence needs around it).
std::string FilterSentence(const json& pod) {
  ClusterCache cache{Config()};
  Metrics metrics;
  Extender extender(cache, nullptr, nullptr, metrics);
  cache.UpsertNode(testobj::NodeOf(testobj::Node("n1", 1)));
  Result<ExtenderArgs> args =
      ExtenderArgs::Parse(json{{"Pod", pod}, {"NodeNames", {"n1"}}}.dump(), extender.Reader());
  EXPECT_TRUE(args.ok());
  const FilterResult result = extender.Filter(*args);
  const std::string reason = result.unresolvable.count("n1") ? result.unresolvable.at("n1") : "";
  const std::string prefix = "invalid mgpu request: ";
  EXPECT_EQ(reason.rfind(prefix, 0), 0u) << reason;
  return reason.substr(std::min(reason.size(), prefix.size()));
}

TEST(Admission, AllowsAValidPodAndOneWithoutMgpuResources) {
  const json allowed = Response(Review("", "Pod", PodIn(Pod("small", 30, 1024))));
  EXPECT_TRUE(allowed["allowed"]);
  EXPECT_FALSE(allowed.contains("status"));
  json cpu_only = PodIn(Pod("cpu", 1, 1));
  cpu_only["spec"]["containers"][0]["resources"]["limits"] = {{"cpu", "2"}};
  cpu_only["metadata"]["annotations"] = {{std::string(kQosLevelAnnotation), "no-such-level"}};
  EXPECT_TRUE(Response(Review("", "Pod", cpu_only))["allowed"]);
}

TEST(Admission, RefusesABrokenPodWithTheFiltersSentence) {
  const json pod = PodIn(Pod("greedy", 150, 1024));
  const json response = Response(Review("", "Pod", pod));
  EXPECT_FALSE(response["allowed"]);
  EXPECT_EQ(response["status"]["code"], 403);
  const std::string sentence = response["status"]["message"];
  EXPECT_EQ(sentence, FilterSentence(pod));
  EXPECT_NE(sentence.find("pod team-a/greedy container c"), std::string::npos) << sentence;
  EXPECT_NE(sentence.find(kNames.core), std::string::npos) << sentence;
}

// A pod created through generateName is named by its prefix; the request's namespace fills a missing one.
TEST(Admission, NamesAPodWithoutNameOrNamespaceFromTheRequest) {
  json pod = Pod("x", 150, 1024);
  pod["metadata"].erase("name");
  pod["metadata"].erase("namespace");
  pod["metadata"]["generateName"] = "batch-";
  const json response = Response(Review("", "Pod", pod));
  EXPECT_FALSE(response["allowed"]);
  EXPECT_EQ(response["status"]["message"].get<std::string>().rfind("pod team-a/batch- container c", 0), 0u)
      << response["status"]["message"];
}

TEST(Admission, JudgesThePodTemplateOfEveryWorkloadKind) {
  const std::pair<const char*, const char*> kinds[] = {{"apps", "Deployment"}, {"apps", "StatefulSet"},
                                                       {"apps", "ReplicaSet"}, {"apps", "DaemonSet"},
                                                       {"batch", "Job"},       {"batch", "CronJob"}};
  for (const auto& [group, kind] : kinds) {
    SCOPED_TRACE(kind);
    EXPECT_TRUE(Response(Review(group, kind, Workload(kind, "web", Pod("p", 50, 2048))))["allowed"]);
    const json refused = Response(Review(group, kind, Workload(kind, "web", Pod("p", 150, 2048))));
    EXPECT_FALSE(refused["allowed"]);
    // The filter's sentence, naming the object refused: the workload and its pod template, not a pod.
    std::string expected = FilterSentence(PodIn(Pod("web", 150, 2048)));
    ASSERT_EQ(expected.rfind("pod team-a/web ", 0), 0u) << expected;
    expected.replace(0, 14, std::string(kind) + " team-a/web's pod template");
    EXPECT_EQ(refused["status"]["message"], expected);
  }
  // A kind with the right name in another group is not one of these.
  EXPECT_TRUE(Response(
      Review("example.com", "Deployment", Workload("Deployment", "web", Pod("p", 150, 2048))))["allowed"]);
}

// DESIGN §3: a key the template lacks is read from the workload (a CronJob's Jobs carry its jobTemplate's).
TEST(Admission, ReadsTheWorkloadsAnnotations) {
  const json three_cards = {{kNames.gpu_count, "3"}};
  for (const char* kind : {"Deployment", "CronJob"}) {
    SCOPED_TRACE(kind);
    const std::string group = std::string(kind) == "CronJob" ? "batch" : "apps";
    EXPECT_TRUE(
        Response(Review(group, kind, Workload(kind, "wide", Pod("p", 150, 3072), three_cards)))["allowed"]);
    EXPECT_FALSE(Response(Review(group, kind, Workload(kind, "wide", Pod("p", 150, 3072))))["allowed"]);
  }
  json cron = Workload("CronJob", "wide", Pod("p", 150, 3072));
  cron["metadata"]["annotations"] = three_cards;  // on the CronJob itself: its Jobs do not carry it
  EXPECT_FALSE(Response(Review("batch", "CronJob", cron))["allowed"]);
}

TEST(Admission, ReadsAPodsControllerThroughTheLookup) {
  json pod = PodIn(Pod("wide-1-x", 150, 3072));
  int lookups = 0;
  const WorkloadLookup lookup = [&](const json&) {
    ++lookups;
    return Annotations{{kNames.gpu_count, "3"}};
  };
  EXPECT_FALSE(Response(Review("", "Pod", pod), lookup)["allowed"]);
  EXPECT_EQ(lookups, 0) << "a pod without a controller has no workload to read";
  pod["metadata"]["ownerReferences"] = {
      {{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "wide-1"}, {"controller", true}}};
  EXPECT_TRUE(Response(Review("", "Pod", pod), lookup)["allowed"]);
  EXPECT_EQ(lookups, 1);
}

// An object that already broke the rules can still be changed in ways the rules do not read.
TEST(Admission, JudgesAnUpdateOnlyWhenWhatTheRulesReadChanged) {
  const json broken = Workload("Deployment", "web", Pod("p", 150, 3072));
  json relabelled = broken;
  relabelled["metadata"]["labels"] = {{"team", "a"}};
  relabelled["spec"]["replicas"] = 5;
  EXPECT_TRUE(Response(Review("apps", "Deployment", relabelled, "UPDATE", broken))["allowed"]);
  json annotated = broken;
  annotated["metadata"]["annotations"][kNames.gpu_count] = "3";
  EXPECT_TRUE(Response(Review("apps", "Deployment", annotated, "UPDATE", broken))["allowed"]) << "now valid";
  json still_broken = broken;
  still_broken["spec"]["template"]["spec"]["containers"][0]["image"] = "y";
  EXPECT_FALSE(Response(Review("apps", "Deployment", still_broken, "UPDATE", broken))["allowed"]);
  EXPECT_TRUE(Response(Review("apps", "Deployment", nullptr, "DELETE", broken))["allowed"]);
  json deleting = PodIn(Pod("gone", 150, 1024));
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_TRUE(Response(Review("", "Pod", deleting, "UPDATE", PodIn(Pod("gone", 150, 1024))))["allowed"]);
  EXPECT_TRUE(Response(Review("", "Service", {{"metadata", {{"name", "s"}}}}))["allowed"]);
}

bool OneSentence(const std::string& text) {
  const std::string trimmed = text.substr(0, text.find_last_not_of('\n') + 1);
  return !trimmed.empty() && trimmed.find('\n') == std::string::npos &&
         trimmed.find(". ") == std::string::npos && trimmed.find('%') == std::string::npos;
}

TEST(Admission, MalformedReviewsGetOneSentence) {
  json no_uid = Review("", "Pod", PodIn(Pod("p", 30, 1024)));
  no_uid["request"].erase("uid");
  json beta = Review("", "Pod", PodIn(Pod("p", 30, 1024)));
  beta["apiVersion"] = "admission.k8s.io/v1beta1";
  for (const std::string& body : {std::string(""), std::string("{"), std::string("[1]"),
                                  std::string("{\"request\":{}}"), no_uid.dump(), beta.dump()}) {
    SCOPED_TRACE(body);
    const AdmissionReply reply = ReviewAdmission(body, Config(), {});
    EXPECT_EQ(reply.status, 400);
    EXPECT_TRUE(OneSentence(reply.body)) << reply.body;
  }
  // A review that can be answered, about an object that cannot be read: refused, with a 400 code.
  for (const json& object : {json("pod"), json::array(), json()}) {
    const json response = Response(Review("", "Pod", object));
    EXPECT_FALSE(response["allowed"]);
    EXPECT_EQ(response["status"]["code"], 400);
    EXPECT_TRUE(OneSentence(response["status"]["message"])) << response;
  }
  json bad_quantity = PodIn(Pod("p", 30, 1024));
  bad_quantity["spec"]["containers"][0]["resources"]["limits"][kNames.core] = "lots";
  const json response = Response(Review("", "Pod", bad_quantity));
  EXPECT_FALSE(response["allowed"]);
  EXPECT_TRUE(OneSentence(response["status"]["message"])) << response;
}

// /mutate-memory: what users write (MiB) stored as the kubelet counts it (devices of memoryUnitMiB), with a
// gpu-count read from the pod's workload; a rewritten pod is left alone; a broken one passes unchanged to
// /validate, which refuses it in MiB terms; a workload's template is judged in MiB.
TEST(Admission, MutateMemoryRewritesMiBIntoDevicesOnce) {
  Config config;
  config.memory_unit_mib = 16;
  const auto answer = [&](const json& review, const WorkloadLookup& workload = {}) {
    const AdmissionReply reply = MutatePodMemory(review.dump(), config, workload);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body)["response"];
  };
  const auto patched = [&](const json& pod, const json& response) {
    EXPECT_TRUE(response["allowed"]) << response;
    EXPECT_TRUE(response.contains("patch")) << response;
    return testadmission::Patched(pod, response);
  };
  json pod = PodIn(Pod("four-gib", 30, 4096));
  const json stored = patched(pod, answer(Review("", "Pod", pod)));
  EXPECT_EQ(stored["spec"]["containers"][0]["resources"]["limits"][kNames.memory], "256");
  EXPECT_EQ(stored["metadata"]["annotations"][kNames.memory_as_written], R"({"c":"4096"})");
  EXPECT_FALSE(answer(Review("", "Pod", stored)).contains("patch")) << "rewritten twice";

  // gpu-count 2 on the Deployment: each card's 1000 MiB rounds up to 63 devices.
  json pair = PodIn(Pod("pair", 60, 2000));
  pair["metadata"]["ownerReferences"] = {
      {{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "rs"}, {"uid", "u"}, {"controller", true}}};
  const WorkloadLookup two_cards = [](const json&) { return Annotations{{kNames.gpu_count, "2"}}; };
  EXPECT_EQ(patched(pair, answer(Review("", "Pod", pair), two_cards))["spec"]["containers"][0]["resources"]
                ["limits"][kNames.memory],
            "126");

  const json broken = PodIn(Pod("uneven", 200, 1001));
  const json passed = answer(Review("", "Pod", broken), two_cards);
  EXPECT_TRUE(passed["allowed"]);
  EXPECT_FALSE(passed.contains("patch"));
  const AdmissionReply validated = ReviewAdmission(Review("", "Pod", broken).dump(), config, {});
  EXPECT_EQ(json::parse(validated.body)["response"]["status"]["message"],
            "pod team-a/uneven container c: " + kNames.memory + " 1001 does not divide evenly over 2 cards");
  // A template of 2 × 1000 MiB is fine in MiB (1000 devices of 16 MiB would be 16 GB a card, still fine,
  // but 1001 MiB over 2 cards is refused in MiB terms, not in devices).
  const json deployment = Workload("Deployment", "web", PodIn(Pod("t", 200, 1001)));
  const AdmissionReply judged = ReviewAdmission(Review("apps", "Deployment", deployment).dump(), config, {});
  EXPECT_EQ(json::parse(judged.body)["response"]["status"]["message"],
            "Deployment team-a/web's pod template container c: " + kNames.memory +
                " 1001 does not divide evenly over 2 cards");
  EXPECT_FALSE(answer(Review("apps", "Deployment", deployment)).contains("patch")) << "pods only";
}

// Over the extender's server, whether or not its cache is ready (the webhook needs none).
TEST(Admission, ServedAtValidateEvenBeforeTheCacheIsReady) {
  ClusterCache cache{Config()};
  Metrics metrics;
  Extender extender(cache, nullptr, nullptr, metrics);
  HttpServer server(extender, cache, metrics, [] { return false; });
  ExtenderConfig config;
  config.max_body_bytes = 1 << 20;
  ASSERT_TRUE(server.Start("127.0.0.1:0", config).ok());
  httplib::Client client("127.0.0.1", server.port());
  auto res =
      client.Post("/validate", Review("", "Pod", PodIn(Pod("greedy", 150, 1024))).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_FALSE(json::parse(res->body)["response"]["allowed"]);
  auto mutated = client.Post("/mutate-memory", Review("", "Pod", PodIn(Pod("small", 30, 1024))).dump(),
                             "application/json");
  ASSERT_TRUE(mutated);
  EXPECT_EQ(json::parse(mutated->body)["response"].value("patchType", ""), "JSONPatch");
  auto bad = client.Post("/validate", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(client.Get("/metrics")->body.find("\nmgpu_extender_ready 0\n"), std::string::npos);
  EXPECT_NE(metrics.Render(*cache.Snapshot())
                .find("mgpu_extender_requests_total{verb=\"validate\",code=\"200\"} 1"),
            std::string::npos);
  server.Stop();
}

}  // namespace
}  // namespace mgpu::extender
