#include "extender/wire.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace mgpu::extender {
namespace {

using nlohmann::json;

std::shared_ptr<const PodFacts> ReadDefault(const json& pod) {
  return std::make_shared<const PodFacts>(ReadPod(pod, Config()));
}

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(MGPU_FIXTURES_DIR) + "/kube-scheduler/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_TRUE(in.good() || in.eof()) << name;
  return s.str();
}

TEST(Wire, CacheModeFilterArgsGiveNamesAndPod) {
  Result<ExtenderArgs> args = ExtenderArgs::Parse(Fixture("v1.32/cache-filter-001.json"), ReadDefault);
  ASSERT_TRUE(args.ok()) << args.message();
  EXPECT_FALSE(args->full_nodes);
  EXPECT_EQ(args->node_names, (std::vector<std::string>{"fake-node-1", "fake-node-2"}));
  EXPECT_EQ(args->pod->key.substr(args->pod->key.find('/') + 1), "gpu-pod");
}

TEST(Wire, FullNodesModeReadsNamesAndEchoesPassingNodesVerbatim) {
  const std::string body = Fixture("v1.32/nocache-filter-001.json");
  Result<ExtenderArgs> args = ExtenderArgs::Parse(body, ReadDefault);
  ASSERT_TRUE(args.ok()) << args.message();
  EXPECT_TRUE(args->full_nodes);
  EXPECT_EQ(args->node_names, (std::vector<std::string>{"fake-node-1", "fake-node-2"}));
  FilterResult result;
  result.passed = {1};
  result.failed["fake-node-1"] = "no card";
  const json reply = json::parse(EncodeFilterResult(*args, result));
  const json items = json::parse(body)["Nodes"]["items"];
  ASSERT_EQ(reply["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(reply["Nodes"]["items"][0], items[1]);
  EXPECT_TRUE(reply["NodeNames"].is_null());
  EXPECT_EQ(reply["FailedNodes"]["fake-node-1"], "no card");
  EXPECT_EQ(reply["Error"], "");
}

TEST(Wire, CacheModeReplyMatchesTheRecordedShape) {
  Result<ExtenderArgs> args = ExtenderArgs::Parse(Fixture("v1.32/cache-fail1-filter-001.json"), ReadDefault);
  ASSERT_TRUE(args.ok());
  FilterResult result;
  result.passed = {1};
  result.failed["fake-node-1"] = "k8sh extender: FAIL_NODES";
  json want = json::parse(Fixture("v1.32/cache-fail1-filter-001.response.json"));
  want["FailedAndUnresolvableNodes"] = json::object();
  EXPECT_EQ(json::parse(EncodeFilterResult(*args, result)), want);
}

TEST(Wire, KeysInAnyCase) {
  Result<ExtenderArgs> args =
      ExtenderArgs::Parse(R"({"pod":{"metadata":{"name":"p"}},"nodenames":["a"]})", ReadDefault);
  ASSERT_TRUE(args.ok()) << args.message();
  EXPECT_EQ(args->node_names, std::vector<std::string>{"a"});
  Result<ExtenderArgs> full = ExtenderArgs::Parse(
      R"({"POD":{},"nodes":{"Items":[{"Metadata":{"Name":"n1"}}]},"nodeNames":null})", ReadDefault);
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_EQ(full->node_names, std::vector<std::string>{"n1"});
  Result<BindArgs> bind = BindArgs::Parse(R"({"podname":"p","podnamespace":"ns","poduid":"u","node":"n"})");
  ASSERT_TRUE(bind.ok()) << bind.message();
  EXPECT_EQ(bind->pod_namespace, "ns");
}

TEST(Wire, MalformedArgsAreErrorsNotCrashes) {
  for (const char* body : {"", "{", "[]", "null", "{\"Pod\":5,\"NodeNames\":[]}", "{\"NodeNames\":[\"a\"]}",
                           "{\"Pod\":{},\"NodeNames\":5}", "{\"Pod\":{},\"NodeNames\":[1,2]}",
                           "{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{}}]}}",
                           "{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{\"name\":7}}]}}",
                           "{\"Pod\":{\"a\":},\"NodeNames\":[]}", "\xff\xfe"}) {
    EXPECT_FALSE(ExtenderArgs::Parse(body, ReadDefault).ok()) << body;
  }
  EXPECT_FALSE(BindArgs::Parse("{\"PodName\":3,\"Node\":\"n\"}").ok());
  EXPECT_FALSE(BindArgs::Parse("{\"PodName\":\"p\"}").ok());
  EXPECT_FALSE(BindArgs::Parse("nonsense").ok());
  EXPECT_FALSE(PreemptArgs::Parse("{\"Pod\":{},\"NodeNameToMetaVictims\":[]}", ReadDefault).ok());
  EXPECT_FALSE(
      PreemptArgs::Parse("{\"Pod\":{},\"NodeNameToMetaVictims\":{\"n\":{\"Pods\":[{}]}}}", ReadDefault).ok());
}

TEST(Wire, BindFixture) {
  Result<BindArgs> args = BindArgs::Parse(Fixture("v1.32-bind-preempt/bp-bind-003.json"));
  ASSERT_TRUE(args.ok()) << args.message();
  EXPECT_EQ(args->pod_name, "low-1");
  EXPECT_EQ(args->pod_namespace, "default");
  EXPECT_EQ(args->pod_uid, "5e6ed4cb-0401-4d1d-83e8-71d10f9e0005");
  EXPECT_EQ(args->node, "fake-node-1");
  EXPECT_EQ(json::parse(EncodeError("")),
            json::parse(Fixture("v1.32-bind-preempt/bp-bind-003.response.json")));
}

TEST(Wire, PreemptFixtureRoundTrips) {
  Result<PreemptArgs> args =
      PreemptArgs::Parse(Fixture("v1.32-bind-preempt/bp-preempt-006.json"), ReadDefault);
  ASSERT_TRUE(args.ok()) << args.message();
  ASSERT_EQ(args->victims.size(), 2u);
  EXPECT_EQ(args->victims["fake-node-1"].pod_uids,
            std::vector<std::string>{"5e6ed4cb-0401-4d1d-83e8-71d10f9e0005"});
  EXPECT_EQ(json::parse(EncodePreemptResult(args->victims)),
            json::parse(Fixture("v1.32-bind-preempt/bp-preempt-006.response.json")));
}

TEST(Wire, PreemptWithFullVictimPods) {
  Result<PreemptArgs> args = PreemptArgs::Parse(
      R"({"Pod":{},"NodeNameToVictims":{"n":{"Pods":[{"metadata":{"uid":"u1"}}],"NumPDBViolations":2}}})",
      ReadDefault);
  ASSERT_TRUE(args.ok()) << args.message();
  EXPECT_EQ(args->victims["n"].pod_uids, std::vector<std::string>{"u1"});
  EXPECT_EQ(args->victims["n"].num_pdb_violations, 2);
}

TEST(Wire, PrioritizeReplyShape) {
  EXPECT_EQ(json::parse(EncodePrioritizeResult({{"fake-node-1", 5}, {"fake-node-2", 5}})),
            json::parse(Fixture("v1.32-bind-preempt/bp-prioritize-002.response.json")));
}

TEST(Wire, RepliesEscapeWhatJsonMust) {
  const std::string tricky = "a\"b\\c\nd\x01e\xc3\xa9/";
  std::string literal;
  AppendJsonString(literal, tricky);
  EXPECT_EQ(json::parse(literal).get<std::string>(), tricky);
  ExtenderArgs args;
  args.node_names = {tricky, "n2"};
  FilterResult result;
  result.passed = {0};
  result.failed["n2"] = tricky;
  result.error = tricky;
  const json reply = json::parse(EncodeFilterResult(args, result));
  EXPECT_EQ(reply["NodeNames"], json::array({tricky}));
  EXPECT_EQ(reply["FailedNodes"]["n2"], tricky);
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"], json::object());
  EXPECT_EQ(reply["Error"], tricky);
  EXPECT_EQ(json::parse(EncodePrioritizeResult({{tricky, 7}}))[0]["Host"], tricky);
  EXPECT_EQ(json::parse(EncodePrioritizeResult({})), json::array());
}

// Brackets nested far deeper than any Kubernetes object would exhaust the stack of whatever copies or dumps
// the value later (a 0.8 MB /filter body crashed the extender in a dump; fuzz/regressions/ keeps it): every
// body is refused with one sentence instead.
TEST(Wire, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<ExtenderArgs> args = ExtenderArgs::Parse(
      R"({"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"mgpu.io/mgpu-core":)" + deep +
          R"(}}}]}},"NodeNames":["n"]})",
      ReadDefault);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.message(), "ExtenderArgs nests deeper than 256 levels");
  Result<BindArgs> bind = BindArgs::Parse(R"({"PodName":"p","Node":"n","x":)" + deep + "}");
  ASSERT_FALSE(bind.ok());
  EXPECT_EQ(bind.message(), "ExtenderBindingArgs nests deeper than 256 levels");
  Result<PreemptArgs> preempt = PreemptArgs::Parse(R"({"Pod":{"x":)" + deep + "}}", ReadDefault);
  ASSERT_FALSE(preempt.ok());
  EXPECT_EQ(preempt.message(), "ExtenderPreemptionArgs nests deeper than 256 levels");
  // A pod of ordinary depth still parses.
  EXPECT_TRUE(
      ExtenderArgs::Parse(R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":["n"]})", ReadDefault).ok());
}

TEST(Wire, AtMostKMaxNodeNamesNodes) {
  json names = json::array();
  for (size_t i = 0; i < kMaxNodeNames; ++i) names.push_back("n" + std::to_string(i));
  EXPECT_TRUE(
      ExtenderArgs::Parse(json{{"Pod", json::object()}, {"NodeNames", names}}.dump(), ReadDefault).ok());
  names.push_back("one-more");
  Result<ExtenderArgs> args =
      ExtenderArgs::Parse(json{{"Pod", json::object()}, {"NodeNames", names}}.dump(), ReadDefault);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.message(),
            "ExtenderArgs names 65537 nodes, more than the 65536 mgpu-scheduler-extender takes");
}

// kube-scheduler formats reasons as a format string: a '%' from a pod's own text reaches it as '％'.
TEST(Wire, ReasonsCarryNoPercentSign) {
  const std::string fullwidth = "\xef\xbc\x85";
  ExtenderArgs args;
  args.node_names = {"n1"};
  FilterResult result;
  result.failed["n1"] = "gpu-count \"50%\" is bad";
  result.unresolvable["n2"] = "%s%n";
  result.error = "100%";
  const json reply = json::parse(EncodeFilterResult(args, result));
  EXPECT_EQ(reply["FailedNodes"]["n1"], "gpu-count \"50" + fullwidth + "\" is bad");
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"]["n2"], fullwidth + "s" + fullwidth + "n");
  EXPECT_EQ(reply["Error"], "100" + fullwidth);
  EXPECT_EQ(json::parse(EncodeError("5%"))["Error"], "5" + fullwidth);
}

}  // namespace
}  // namespace mgpu::extender
