// The DRA webhooks with AdmissionReview bodies of admission.k8s.io/v1 (the shape admission_test.cc uses),
// directly and over the extender's HTTP server. That the API server applies the patch and the scheduler
// allocates the resulting claims is tests/dra/'s part (the real v1.36.2 components).
#include "extender/dra_admission.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/dra.h"
#include "common/test_objects.h"
#include "extender/extender.h"
#include "extender/server.h"
#include "extender/test_admission.h"

namespace mgpu::extender {
namespace {

using nlohmann::json;

const ResourceNames kNames = Config().Names();

json Review(const std::string& kind, const json& object, const std::string& operation = "CREATE",
            bool dry_run = false, const std::string& group = "") {
  json request = {{"uid", "u-1"},          {"kind", {{"group", group}, {"version", "v1"}, {"kind", kind}}},
                  {"namespace", "team-a"}, {"operation", operation},
                  {"object", object},      {"dryRun", dry_run}};
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
}

json Response(const AdmissionReply& reply) {
  EXPECT_EQ(reply.status, 200) << reply.body;
  return json::parse(reply.body)["response"];
}

using testadmission::Patched;

struct Written {
  std::vector<std::pair<std::string, json>> templates;
  Status fail = Status::Ok();
  TemplateWriter Writer() {
    return [this](const std::string& ns, const json& t) {
      if (!fail.ok()) return fail;
      templates.emplace_back(ns, t);
      return Status::Ok();
    };
  }
};

json OnlinePod() {
  json pod = testobj::Pod("infer", 30, 4096);
  pod["metadata"].erase("uid");
  pod["spec"]["containers"].push_back({{"name", "sidecar"}, {"image", "x"}});
  pod["spec"]["containers"][0]["resources"]["requests"] = {
      {kNames.core, "30"}, {kNames.memory, "4096"}, {"cpu", "1"}};
  return pod;
}

TEST(DraMutation, AnOnlinePodAsksItsShareThroughAClaimTemplate) {
  Written written;
  const json pod = OnlinePod();
  const json response = Response(MutatePodForDra(Review("Pod", pod).dump(), Config(), {}, written.Writer()));
  EXPECT_TRUE(response["allowed"]);
  const json out = Patched(pod, response);
  ASSERT_EQ(written.templates.size(), 1u);
  const auto& [ns, tmpl] = written.templates[0];
  EXPECT_EQ(ns, "default");
  EXPECT_EQ(tmpl["kind"], "ResourceClaimTemplate");
  EXPECT_EQ(tmpl["metadata"]["name"], "mgpu.io.fixed-share-online-c30-m4096-x1");
  EXPECT_EQ(tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"],
            json({{"cores", "30"}, {"memory", "4Gi"}}));
  EXPECT_EQ(out["spec"]["resourceClaims"],
            json::array({{{"name", "mgpu-0"},
                          {"resourceClaimTemplateName", "mgpu.io.fixed-share-online-c30-m4096-x1"}}}));
  const json& c = out["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["claims"], json::array({{{"name", "mgpu-0"}}}));
  // The mgpu limits are gone; one D/dra-gpu sends the pod to the extender.
  EXPECT_EQ(c["resources"]["limits"], json({{kNames.dra_resource, "1"}}));
  EXPECT_EQ(c["resources"]["requests"], json({{"cpu", "1"}}));
  EXPECT_EQ(out["spec"]["containers"][1], pod["spec"]["containers"][1]);  // no GPU: untouched
  // The rewritten pod asks nothing of the device plugin any more: /validate lets it be.
  EXPECT_FALSE(ParsePodRequest(out, Config())->AsksForGpu());
  // The extender reads it as the DRA pod it was written as: the same request, from D/dra-limits.
  EXPECT_EQ(json::parse(out["metadata"]["annotations"][kNames.dra_limits].get<std::string>()),
            json({{"c", {{kNames.core, "30"}, {kNames.memory, "4096"}}}}));  // devices of 1 MiB
  const PodFacts facts = ReadPod(out, Config());
  EXPECT_TRUE(facts.dra);
  ASSERT_TRUE(facts.request.ok()) << facts.request.message();
  PodRequest asked = *ParsePodRequest(pod, Config());
  EXPECT_EQ(facts.request->containers, asked.containers);
  EXPECT_EQ(facts.host.cpu_milli, 1000);
  EXPECT_FALSE(ReadPod(pod, Config()).dra);
}

// mgpu-memory in MiB whatever the memory unit, whichever of the two mutating webhooks runs first: the claim
// asks the MiB written (each card's part rounded up to the unit), D/dra-limits holds devices, as a stored pod.
TEST(DraMutation, MemoryWrittenInMiBWhicheverWebhookRunsFirst) {
  Config config;
  config.memory_unit_mib = 16;
  const json pod = OnlinePod();  // 4096 MiB
  Written first, second;
  const json dra_first = Patched(pod, Response(MutatePodForDra(Review("Pod", pod).dump(), config, {},
                                                               first.Writer())));
  const json rewritten = Patched(pod, Response(MutatePodMemory(Review("Pod", pod).dump(), config, {})));
  const json memory_first = Patched(
      rewritten, Response(MutatePodForDra(Review("Pod", rewritten).dump(), config, {}, second.Writer())));
  ASSERT_EQ(first.templates.size(), 1u);
  EXPECT_EQ(first.templates, second.templates);
  EXPECT_EQ(first.templates[0].second["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
                                     ["requests"]["memory"],
            "4Gi");
  for (const json& out : {dra_first, memory_first}) {
    EXPECT_EQ(json::parse(out["metadata"]["annotations"][kNames.dra_limits].get<std::string>())["c"]
                                                                                          [kNames.memory],
              "256");
    const PodFacts facts = ReadPod(out, config);
    ASSERT_TRUE(facts.request.ok()) << facts.request.message();
    EXPECT_EQ(facts.request->containers[0].memory_mib, 4096);
  }
}

TEST(DraMutation, AnUnreadableDraLimitsAnnotationLeavesThePodToKubeScheduler) {
  Written written;
  json out = Patched(OnlinePod(), Response(MutatePodForDra(Review("Pod", OnlinePod()).dump(), Config(), {},
                                                           written.Writer())));
  for (const char* bad : {"[1]", R"({"main":{"cpu":"1"}})", R"({"nobody":{}})", "{"}) {
    SCOPED_TRACE(bad);
    out["metadata"]["annotations"][kNames.dra_limits] = bad;
    const PodFacts facts = ReadPod(out, Config());
    EXPECT_TRUE(facts.dra);
    ASSERT_TRUE(facts.request.ok());
    EXPECT_FALSE(facts.request->AsksForGpu());  // every node passes, none is scored
    ASSERT_EQ(facts.problems.size(), 1u);
    EXPECT_NE(facts.problems[0].find(kNames.dra_limits), std::string::npos) << facts.problems[0];
  }
}

TEST(DraMutation, QosPolicyAndCardCountComeThroughTheWorkload) {
  Written written;
  json pod = testobj::Pod("train", 0, 2048);
  pod["spec"]["containers"][0]["resources"]["limits"] = {{kNames.reclaimed_core, "40"},
                                                         {kNames.memory, "2048"}};
  pod["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "apps/v1"},
                                                     {"kind", "ReplicaSet"},
                                                     {"name", "train-1"},
                                                     {"controller", true},
                                                     {"uid", "x"}}});
  const WorkloadLookup workload = [](const json&) {
    return Annotations{{"mgpu.io/mgpu-compute-policy", "guaranteed-burst-share"}};
  };
  const json response =
      Response(MutatePodForDra(Review("Pod", pod).dump(), Config(), workload, written.Writer()));
  ASSERT_TRUE(response["allowed"]);
  ASSERT_EQ(written.templates.size(), 1u);
  const json& exactly = written.templates[0].second["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["deviceClassName"], "guaranteed-burst-share.mgpu.io");
  EXPECT_EQ(exactly["capacity"]["requests"], json({{"reclaimedCores", "40"}, {"memory", "2Gi"}}));

  Written multi;
  json two = testobj::Pod("two", 100, 32768);
  two["metadata"]["annotations"] = {{"mgpu.io/gpu-count", "2"}};
  ASSERT_TRUE(Response(MutatePodForDra(Review("Pod", two).dump(), Config(), {}, multi.Writer()))["allowed"]);
  const json& spec = multi.templates[0].second["spec"]["spec"];
  EXPECT_EQ(spec["devices"]["requests"][0]["exactly"]["count"], 2);
  EXPECT_TRUE(dra::CheckClaimSpec(spec, Config(), "t").ok());

  Written whole;
  json dedicated = testobj::Pod("llm", 100, 81920);
  dedicated["metadata"]["annotations"] = {{"katalyst.kubewharf.io/qos_level", "dedicated_cores"}};
  ASSERT_TRUE(
      Response(MutatePodForDra(Review("Pod", dedicated).dump(), Config(), {}, whole.Writer()))["allowed"]);
  EXPECT_EQ(whole.templates[0].second["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "whole.mgpu.io");
}

TEST(DraMutation, RefusesWhatValidateRefusesAndLeavesOtherPodsAlone) {
  Written written;
  const json refusal = Response(MutatePodForDra(Review("Pod", testobj::Pod("greedy", 150, 1024)).dump(),
                                                Config(), {}, written.Writer()));
  EXPECT_FALSE(refusal["allowed"]);
  EXPECT_NE(refusal["status"]["message"].get<std::string>().find("150 is above 100"), std::string::npos);
  json plain = {{"metadata", {{"name", "web"}}},
                {"spec", {{"containers", {{{"name", "c"}, {"image", "x"}}}}}}};
  const json untouched =
      Response(MutatePodForDra(Review("Pod", plain).dump(), Config(), {}, written.Writer()));
  EXPECT_TRUE(untouched["allowed"]);
  EXPECT_FALSE(untouched.contains("patch"));
  EXPECT_TRUE(Response(MutatePodForDra(Review("Pod", OnlinePod(), "UPDATE").dump(), Config(), {},
                                       written.Writer()))["allowed"]);
  EXPECT_TRUE(written.templates.empty());
  EXPECT_EQ(MutatePodForDra("{", Config(), {}, written.Writer()).status, 400);
}

TEST(DraMutation, ADryRunCreatesNothingAndAFailedTemplateRefusesThePod) {
  Written written;
  const json dry = Response(
      MutatePodForDra(Review("Pod", OnlinePod(), "CREATE", true).dump(), Config(), {}, written.Writer()));
  EXPECT_TRUE(dry["allowed"]);
  EXPECT_TRUE(dry.contains("patch"));
  EXPECT_TRUE(written.templates.empty());
  written.fail = Error{"forbidden"};
  const json failed =
      Response(MutatePodForDra(Review("Pod", OnlinePod()).dump(), Config(), {}, written.Writer()));
  EXPECT_FALSE(failed["allowed"]);
  EXPECT_EQ(failed["status"]["message"],
            "pod default/infer: cannot create ResourceClaimTemplate mgpu.io.fixed-share-online-c30-m4096-x1: "
            "forbidden");
}

TEST(DraClaimValidation, RefusesClaimsAndTemplatesThatBreakARule) {
  json claim = {
      {"metadata", {{"name", "c"}}},
      {"spec",
       {{"devices",
         {{"requests",
           {{{"name", "gpu"},
             {"exactly",
              {{"deviceClassName", "mgpu.io"}, {"capacity", {{"requests", {{"cores", "30"}}}}}}}}}}}}}}};
  const json refused = Response(ReviewClaimAdmission(
      Review("ResourceClaim", claim, "CREATE", false, "resource.k8s.io").dump(), Config()));
  EXPECT_FALSE(refused["allowed"]);
  EXPECT_EQ(refused["status"]["message"].get<std::string>().rfind(
                "ResourceClaim team-a/c request gpu asks no memory", 0),
            0u);
  // A claim's status updates (allocation) are not judged again.
  EXPECT_TRUE(Response(ReviewClaimAdmission(
      Review("ResourceClaim", claim, "UPDATE", false, "resource.k8s.io").dump(), Config()))["allowed"]);
  json tmpl = {{"metadata", {{"name", "t"}}}, {"spec", {{"spec", claim["spec"]}}}};
  EXPECT_FALSE(Response(
      ReviewClaimAdmission(Review("ResourceClaimTemplate", tmpl, "UPDATE", false, "resource.k8s.io").dump(),
                           Config()))["allowed"]);
  tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "4Gi";
  EXPECT_TRUE(Response(
      ReviewClaimAdmission(Review("ResourceClaimTemplate", tmpl, "CREATE", false, "resource.k8s.io").dump(),
                           Config()))["allowed"]);
}

// The API server's objects a hand-written pod names: the template "t20" (20 cores, 4 GiB of class mgpu.io) and
// the claim "offline-40"; anything else does not exist.
ClaimSpecReader Templates() {
  return [](const std::string& ns, const json& entry) -> Result<std::optional<json>> {
    EXPECT_EQ(ns, "team-a");
    if (entry.value("resourceClaimTemplateName", "") == "t20")
      return std::optional<json>(json::parse(R"({"devices": {"requests": [{"name": "gpu", "exactly":
          {"deviceClassName": "mgpu.io", "capacity": {"requests": {"cores": "20", "memory": "4Gi"}}}}]}})"));
    if (entry.value("resourceClaimName", "") == "offline-40")
      return std::optional<json>(json::parse(R"({"devices": {"requests": [{"name": "gpu", "exactly":
          {"deviceClassName": "mgpu.io", "capacity": {"requests": {"reclaimedCores": "40", "memory": "2Gi"}}}}]}})"));
    return std::optional<json>();
  };
}

// A pod written with claims by hand: container "c" holds claim "gpu" of template `from`.
json HandWrittenPod(const std::string& from = "t20") {
  return json::parse(R"({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "byhand", "namespace": "team-a"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": ")" +
                     from + R"("}], "containers": [{"name": "c", "image": "x",
      "resources": {"claims": [{"name": "gpu"}], "requests": {"cpu": "1"}}}]}})");
}

// A pod whose claim names mgpu's class without /mutate gets what /mutate gives its pods: one D/dra-gpu, and
// D/dra-limits with the annotations that make the extender read the claim's share.
TEST(DraClaimMutation, AHandWrittenClaimIsCountedAsMutatesPodsAre) {
  const json pod = HandWrittenPod();
  const json out = Patched(pod, Response(MutateClaimPodForDra(Review("Pod", pod).dump(), Config(), Templates())));
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["limits"], json({{kNames.dra_resource, "1"}}));
  EXPECT_EQ(out["spec"]["containers"][0]["resources"]["claims"], pod["spec"]["containers"][0]["resources"]["claims"]);
  const PodFacts facts = ReadPod(out, Config());
  EXPECT_TRUE(facts.dra);
  ASSERT_TRUE(facts.request.ok()) << facts.request.message();
  ASSERT_EQ(facts.request->containers.size(), 1u);
  EXPECT_EQ(facts.request->qos, Qos::kOnline);
  EXPECT_EQ(facts.request->compute_policy, ComputePolicy::kFixedShare);
  EXPECT_EQ(facts.request->containers[0].core, 20);
  EXPECT_EQ(facts.request->containers[0].memory_mib, 4096);

  json offline = HandWrittenPod();
  offline["spec"]["resourceClaims"][0] = {{"name", "gpu"}, {"resourceClaimName", "offline-40"}};
  const PodFacts off = ReadPod(
      Patched(offline, Response(MutateClaimPodForDra(Review("Pod", offline).dump(), Config(), Templates()))),
      Config());
  ASSERT_TRUE(off.request.ok()) << off.request.message();
  EXPECT_EQ(off.request->qos, Qos::kOffline);
  EXPECT_EQ(off.request->containers[0].reclaimed_core, 40);
}

// A pod asking whole cards through <driver>/gpu keeps its limits (no D/dra-gpu: kube-scheduler calls the
// extender for <driver>/gpu itself, and fails a pod with D/dra-gpu beside it) and gets D/dra-limits, the
// annotations and the DRA profile: the extender reads it as a dedicated_cores pod on that many cards.
TEST(DraClaimMutation, WholeCardsThroughTheExtendedResourceAreCountedToo) {
  const Config config;
  json pod = HandWrittenPod();
  pod["spec"].erase("resourceClaims");
  json& resources = pod["spec"]["containers"][0]["resources"];
  resources.erase("claims");
  resources["limits"] = {{dra::WholeCardResource(config), "2"}};
  const json out = Patched(pod, Response(MutateClaimPodForDra(Review("Pod", pod).dump(), config, Templates())));
  EXPECT_EQ(out["spec"]["containers"][0]["resources"], pod["spec"]["containers"][0]["resources"]);
  EXPECT_EQ(out["spec"].value("schedulerName", ""), config.dra.scheduler_name);
  const PodFacts facts = ReadPod(out, config);
  EXPECT_TRUE(facts.dra);
  ASSERT_TRUE(facts.request.ok()) << facts.request.message();
  EXPECT_TRUE(facts.request->dedicated);
  ASSERT_EQ(facts.request->containers.size(), 1u);
  EXPECT_EQ(facts.request->containers[0].card_count, 2);
  EXPECT_EQ(facts.request->containers[0].core, 200);
}

// Both webhooks send the pods they give D/dra-gpu to dra.schedulerName's profile, unless the pod names another
// scheduler; with the setting empty, the pod's schedulerName is left alone.
TEST(DraMutation, DraPodsGoToTheDraProfile) {
  const auto scheduler_of = [](json pod, const Config& config, bool by_hand) {
    Written written;
    const std::string body = Review("Pod", pod).dump();
    const json out = Patched(pod, Response(by_hand ? MutateClaimPodForDra(body, config, Templates())
                                                   : MutatePodForDra(body, config, {}, written.Writer())));
    return out["spec"].value("schedulerName", "");
  };
  const Config config;
  EXPECT_EQ(config.dra.scheduler_name, "mgpu-dra");
  for (bool by_hand : {false, true}) {
    json pod = by_hand ? HandWrittenPod() : OnlinePod();
    EXPECT_EQ(scheduler_of(pod, config, by_hand), "mgpu-dra");
    pod["spec"]["schedulerName"] = "default-scheduler";  // what the API server's defaulting writes
    EXPECT_EQ(scheduler_of(pod, config, by_hand), "mgpu-dra");
    pod["spec"]["schedulerName"] = "mgpu-scheduler";
    EXPECT_EQ(scheduler_of(pod, config, by_hand), "mgpu-scheduler");
    pod["spec"]["schedulerName"] = "default-scheduler";
    Config unset;
    unset.dra.scheduler_name = "";
    EXPECT_EQ(scheduler_of(pod, unset, by_hand), "default-scheduler");
  }
  // A pod that asks nothing of mgpu keeps its scheduler.
  json plain = OnlinePod();
  plain["spec"]["containers"].erase(0);
  EXPECT_EQ(scheduler_of(plain, config, false), "");
}

// Pods /mutate rewrote, pods whose claims do not exist (yet) or are another driver's, and pods without claims
// pass unchanged; two shares in one container are refused with one sentence.
TEST(DraClaimMutation, PassesOtherPodsAndRefusesWhatIsNotOneMgpuPod) {
  json rewritten = HandWrittenPod();
  rewritten["metadata"]["annotations"][kNames.dra_limits] = R"({"c": {}})";
  for (const json& pod : {rewritten, HandWrittenPod("missing"), testobj::Pod("plain", 0, 0)}) {
    const json response = Response(MutateClaimPodForDra(Review("Pod", pod).dump(), Config(), Templates()));
    EXPECT_TRUE(response["allowed"]);
    EXPECT_FALSE(response.contains("patch")) << pod.dump();
  }
  json two = HandWrittenPod();
  two["spec"]["resourceClaims"].push_back({{"name", "more"}, {"resourceClaimTemplateName", "t20"}});
  two["spec"]["containers"][0]["resources"]["claims"].push_back({{"name", "more"}});
  const AdmissionReply refused = MutateClaimPodForDra(Review("Pod", two).dump(), Config(), Templates());
  const json answer = json::parse(refused.body)["response"];
  EXPECT_FALSE(answer["allowed"]);
  EXPECT_EQ(answer["status"]["message"],
            "pod team-a/byhand container c holds 2 shares of mgpu.io classes; mgpu counts one claim per container");
}

TEST(DraMutation, ServedOverTheExtendersHttpServer) {
  ClusterCache cache{Config()};
  Metrics metrics;
  Extender extender(cache, nullptr, nullptr, metrics);
  Written written;
  HttpServer server(
      extender, cache, metrics, [] { return false; }, {}, written.Writer(), Templates());
  ASSERT_TRUE(server.Start("127.0.0.1:0", ExtenderConfig()).ok());
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post("/mutate", Review("Pod", OnlinePod()).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(json::parse(res->body)["response"].contains("patch"));
  EXPECT_EQ(written.templates.size(), 1u);
  auto byhand = client.Post("/mutate-claims", Review("Pod", HandWrittenPod()).dump(), "application/json");
  ASSERT_TRUE(byhand);
  EXPECT_EQ(byhand->status, 200);
  EXPECT_TRUE(json::parse(byhand->body)["response"].contains("patch"));
  auto claims = client.Post("/validate-claims", "[]", "application/json");
  ASSERT_TRUE(claims);
  EXPECT_EQ(claims->status, 400);
  server.Stop();
}

}  // namespace
}  // namespace mgpu::extender
