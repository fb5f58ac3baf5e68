// mgpu's DRA mode on the real kube-apiserver, kube-scheduler and kube-controller-manager v1.36.2
// (docs/dra.md; issue 29 part 6), without a kubelet: scripts/cluster.sh --no-kubelet with API-only nodes
// (mgpu-api-nodes: 8 x 80 GiB, 2 x 24 GiB and 4 x 16 GiB cards in turn; MGPU_DRA_API_NODES of them, default
// 12, which keeps the test within a minute: the 1,000-node scale is bench/realcluster_dra.sh's), each node's
// ResourceSlices published with the node daemon's own code (slices.h) in the default layout (dra.cards: fixed)
// but for two node pools of other kinds, as docs/dra.md §2 tells operators to run them (guaranteed: nodes 3
// and 5; fixed-online: nodes 6 and 8), mgpu's DeviceClasses of deploy/dra/,
// and the extender run on this machine serving the DRA webhooks to the API server. What the tests read is
// what the real components made: the slices the API server stored, the claims kube-scheduler allocated
// (device, shareID, consumedCapacity), the pods the API server admitted after calling /mutate. Skipped
// without the Kubernetes binaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "common/codec.h"
#include "common/config.h"
#include "common/dra.h"
#include "common/file.h"
#include "common/request.h"
#include "common/yaml_json.h"
#include "dra/devices.h"
#include "dra/publisher.h"
#include "dra/real_cluster.h"
#include "dra/slices.h"
#include "extender/dra_admission.h"
#include "node/device_state.h"

namespace mgpu::testing::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using mgpu::dra::ClaimSpecFor;
using mgpu::dra::DeviceRef;
using mgpu::dra::NodeCard;

const std::string kRepo = MGPU_SOURCE_DIR;
const std::string kBuild = MGPU_BUILD_DIR;
const std::string kSeeds = std::string(MGPU_FIXTURES_DIR) + "/seed-scenarios/";
// The API-only nodes: MGPU_DRA_API_NODES, at least 3 (the tests use nodes 0 to 2), default 12.
int Nodes() {
  const char* n = std::getenv("MGPU_DRA_API_NODES");
  return n && *n ? std::max(3, std::atoi(n)) : 12;
}
const int kNodes = Nodes();
constexpr auto kWait = 300s;  // a shared 2-core machine: the API server answers slowly under load

const kube::ApiResource kNamespaces{"/api/v1", "namespaces", "Namespace", false};
// One card's usage summed over every allocated claim, from what the scheduler wrote.
struct CardSum {
  int64_t cores = 0, reclaimed = 0, memory_mib = 0, capacity_mib = 0;
  std::set<std::string> variants;  // devices of the card in use
  int offline = 0, multi = 0, whole = 0, claims = 0;
};

class DraApi : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("MGPU_DRA_API_DIR");
    const char* base = std::getenv("MGPU_DRA_API_PORT_BASE");
    cluster_ = std::make_unique<Cluster>(kRepo, dir && *dir ? dir : "/tmp/mgpu-dra-api",
                                         base && *base ? base : "27000");
    bool skipped = false;
    failure_ = cluster_->Up("--no-kubelet --api-nodes " + std::to_string(kNodes) +
                                " --api-node-cards 8x81920,2x24576,4x16384 --scheduler-qps 1000",
                            skipped);
    if (skipped) skip_ = failure_;
    if (!failure_.empty()) return;
    failure_ = cluster_->StartExtender(kBuild, /*webhooks=*/true);
    if (failure_.empty()) failure_ = PublishEveryNode();
  }

  static void TearDownTestSuite() { cluster_.reset(); }

 protected:
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << "skipped: no Kubernetes binaries (" << skip_ << ")";
    ASSERT_TRUE(failure_.empty()) << failure_;
  }

  static kube::Client& Api() { return cluster_->client(); }

  // Every API-only node's slices, from the cards of its D/gpu-inventory (what its device plugin would
  // publish), as the node daemon builds them (mgpu-dra-slices, dra/publisher.h's PublishOnce); and each
  // node's cards as the daemon sees them, for the checks.
  static std::string PublishEveryNode() {
    const Output published =
        Sh(kBuild + "/src/tools/mgpu-dra-slices --kubeconfig " + cluster_->state() + "/kubeconfig");
    if (published.rc != 0) return "mgpu-dra-slices: " + published.out;
    kube::ApiResult nodes = Api().ListNodes({.label_selector = "mgpu.io/api-only=true"});
    if (!nodes.ok()) return nodes.message();
    for (const json& n : nodes->value("items", json::array())) {
      const std::string name = n["metadata"]["name"];
      auto inventory =
          DecodeInventory(n["metadata"]["annotations"].value(Config().Names().gpu_inventory, ""));
      if (!inventory.ok()) return name + ": " + inventory.message();
      std::vector<node::GpuInfo> gpus;
      for (const Card& c : inventory->cards) gpus.push_back({c, -1, ""});
      cards_[name] = mgpu::dra::NodeCardsOf(gpus, Config());
    }
    if (cards_.size() != static_cast<size_t>(kNodes))
      return "expected " + std::to_string(kNodes) + " nodes, found " + std::to_string(cards_.size());
    for (const auto& [node, cards] : {std::pair{"api-node-0003", "guaranteed"}, {"api-node-0005", "guaranteed"},
                                      {"api-node-0006", "fixed-online"}, {"api-node-0008", "fixed-online"}}) {
      if (Status s = Publish(node, cards); !s.ok()) return s.message();
    }
    return "";
  }

  // The node's slices with dra.cards `cards`, as its node daemon publishes them.
  static Status Publish(const std::string& node, const std::string& cards) {
    Config config;
    config.dra.cards = cards;
    return mgpu::dra::PublishOnce(Api(), node, cards_[node], config);
  }

  // Creates `pods` in `ns` one at a time, each once the extender has counted the claims of those before it
  // (its claim informer), and answers the cards ("node/device") they hold.
  static std::set<std::string> PlaceInTurn(const std::string& ns, const std::vector<json>& pods) {
    const std::string port = cluster_->Env("MGPU_CLUSTER_EXTENDER_PORT");
    std::set<std::string> cards;
    std::map<std::string, int> held;  // pods of this call per card
    for (const json& pod : pods) {
      const std::string name = pod["metadata"]["name"];
      kube::ApiResult created = Api().Create(kube::kPods, ns, pod);
      EXPECT_TRUE(created.ok()) << created.message();
      const json results = WaitResults(ns, name);
      EXPECT_EQ(results.size(), 1u) << Unschedulable(ns, name);
      if (results.size() != 1) continue;
      const std::string node = results[0]["pool"];
      const std::string card = node + "/" + results[0]["device"].get<std::string>();
      cards.insert(card);
      const int index = mgpu::dra::ParseDeviceName(results[0]["device"].get<std::string>())->card_index;
      const int64_t core = 20 * ++held[card];
      EXPECT_TRUE(Poll(
          [&] {
            const Output nodes = Sh("curl -sfk https://127.0.0.1:" + port + "/v1/nodes");
            const json view = json::parse(nodes.out, nullptr, false);
            if (!view.is_object()) return false;
            for (const json& n : view.value("nodes", json::array()))
              if (n.value("name", "") == node) return n["cards"][index].value("core", 0) >= core;
            return false;
          },
          kWait))
          << name << " on " << card;
    }
    return cards;
  }

  // A namespace, once kube-controller-manager gave it the ServiceAccount its pods are admitted with.
  static kube::ApiResult CreateNamespace(const std::string& name, const json& labels = json::object()) {
    kube::ApiResult r = Api().Create(kNamespaces, "", {{"metadata", {{"name", name}, {"labels", labels}}}});
    const kube::ApiResource service_accounts{"/api/v1", "serviceaccounts", "ServiceAccount", true};
    if (r.ok()) Poll([&] { return Api().Get(service_accounts, name, "default").ok(); }, kWait);
    return r;
  }

  // A pod of one container holding claim "gpu" of `template_name` (or the claim `claim_name`), pinned to
  // `node` when given.
  static json ClaimPod(const std::string& name, const std::string& template_name,
                       const std::string& node = "", const std::string& claim_name = "") {
    json claim = {{"name", "gpu"}};
    if (claim_name.empty()) {
      claim["resourceClaimTemplateName"] = template_name;
    } else {
      claim["resourceClaimName"] = claim_name;
    }
    json spec = {
        {"terminationGracePeriodSeconds", 1},
        {"resourceClaims", json::array({claim})},
        {"containers",
         json::array({{{"name", "c"}, {"image", "x"}, {"resources", {{"claims", {{{"name", "gpu"}}}}}}}})}};
    if (!node.empty()) spec["nodeSelector"] = {{"kubernetes.io/hostname", node}};
    return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}, {"spec", spec}};
  }

  static json Template(const std::string& name, const json& claim_spec) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaimTemplate"},
            {"metadata", {{"name", name}}},
            {"spec", {{"spec", claim_spec}}}};
  }

  // A pod of one container "c" (1 CPU, 1 GiB) that may go to api-node-0009, -0010 or -0011.
  static json AmongThreeNodes(const std::string& name) {
    const json among = {{"key", "kubernetes.io/hostname"},
                        {"operator", "In"},
                        {"values", {"api-node-0009", "api-node-0010", "api-node-0011"}}};
    json spec = {{"terminationGracePeriodSeconds", 1}};
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] =
        json::array({{{"matchExpressions", json::array({among})}}});
    json container = {{"name", "c"}, {"image", "x"}};
    container["resources"]["requests"] = {{"cpu", "1"}, {"memory", "1Gi"}};
    spec["containers"] = json::array({container});
    return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}, {"spec", spec}};
  }

  static PodRequest Shape(Qos qos, ComputePolicy policy, int core, int64_t memory_mib, int cards = 1,
                          bool dedicated = false) {
    PodRequest p;
    p.qos = qos;
    p.compute_policy = policy;
    p.dedicated = dedicated;
    ContainerRequest c;
    c.name = "c";
    c.card_count = cards;
    (qos == Qos::kOffline ? c.reclaimed_core : c.core) = core * cards;
    c.memory_mib = memory_mib * cards;
    p.containers.push_back(c);
    return p;
  }

  // The allocation results of the driver for the claim of `pod` ("ns/pod" claims as the pod's status names
  // them), once allocated.
  static json ResultsOf(const std::string& ns, const std::string& pod) {
    kube::ApiResult p = Api().GetPod(ns, pod);
    if (!p.ok()) return nullptr;
    const json* statuses = FindPath(*p, {"status", "resourceClaimStatuses"});
    std::string claim;
    if (statuses && statuses->is_array() && !statuses->empty())
      claim = (*statuses)[0].value("resourceClaimName", "");
    if (const json* extended = FindPath(*p, {"status", "extendedResourceClaimStatus", "resourceClaimName"}))
      claim = extended->get<std::string>();
    if (claim.empty()) {
      const json* claims = FindPath(*p, {"spec", "resourceClaims"});
      if (claims && claims->is_array() && !claims->empty())
        claim = (*claims)[0].value("resourceClaimName", "");
    }
    if (claim.empty()) return nullptr;
    kube::ApiResult c = Api().Get(kube::kResourceClaims, ns, claim);
    if (!c.ok()) return nullptr;
    const json* results = FindPath(*c, {"status", "allocation", "devices", "results"});
    return results ? *results : json(nullptr);
  }

  static json WaitResults(const std::string& ns, const std::string& pod) {
    json results;
    Poll([&] { return !(results = ResultsOf(ns, pod)).is_null(); }, kWait);
    return results;
  }

  // Why kube-scheduler left `pod` unscheduled ("" while it has not said).
  static std::string Unschedulable(const std::string& ns, const std::string& pod) {
    kube::ApiResult p = Api().GetPod(ns, pod);
    if (!p.ok()) return "";
    for (const json& c : p->value("status", json::object()).value("conditions", json::array()))
      if (c.value("type", "") == "PodScheduled" && c.value("reason", "") == "Unschedulable")
        return c.value("message", "");
    return "";
  }

  // Every allocated claim of the driver summed per card ("node/gpu-<i>"), with the per-card rules'
  // facts; `cards_used` counts cards holding anything.
  static std::map<std::string, CardSum> Usage() {
    std::map<std::string, CardSum> out;
    kube::ApiResult claims = Api().List(kube::kResourceClaims, "");
    EXPECT_TRUE(claims.ok()) << claims.message();
    for (const json& claim : claims.ok() ? claims->value("items", json::array()) : json::array()) {
      const json* results = FindPath(claim, {"status", "allocation", "devices", "results"});
      if (!results) continue;
      int ours = 0;
      for (const json& r : *results) ours += r.value("driver", "") == "mgpu.io";
      for (const json& r : *results) {
        if (r.value("driver", "") != "mgpu.io") continue;
        const auto device = mgpu::dra::ParseDeviceName(r.value("device", ""));
        EXPECT_TRUE(device.has_value()) << r.dump();
        if (!device) continue;
        const std::string node = r.value("pool", "");
        CardSum& s = out[node + "/gpu-" + std::to_string(device->card_index)];
        auto consumed = mgpu::dra::ReadConsumed(r);
        EXPECT_TRUE(consumed.ok()) << r.dump();
        s.cores += consumed->cores;
        s.reclaimed += consumed->reclaimed_cores;
        s.memory_mib += consumed->memory_mib;
        s.variants.insert(std::string(mgpu::dra::Name(device->variant)));
        s.offline += consumed->reclaimed_cores > 0;
        s.multi += ours > 1;
        s.whole += device->variant == mgpu::dra::Variant::kWhole;
        s.claims += 1;
        for (const NodeCard& c : cards_[node])
          if (c.card.index == device->card_index) s.capacity_mib = c.capacity_mib;
        EXPECT_FALSE(r.value("shareID", "").empty() && device->variant != mgpu::dra::Variant::kWhole)
            << r.dump();
      }
    }
    return out;
  }

  // The per-card rules of DESIGN §4 over everything allocated: capacities, one device (so one compute
  // policy) per card, a whole card alone, offline never beside multi-card shares.
  static void ExpectRulesHold(const std::map<std::string, CardSum>& usage) {
    for (const auto& [card, s] : usage) {
      EXPECT_LE(s.cores, 100) << card;
      EXPECT_LE(s.reclaimed, 100) << card;
      EXPECT_LE(s.memory_mib, s.capacity_mib) << card;
      EXPECT_EQ(s.variants.size(), 1u) << card << " is held through several of its devices";
      if (s.whole > 0) {
        EXPECT_EQ(s.claims, 1) << card;
      }
      EXPECT_FALSE(s.offline > 0 && s.multi > 0) << card;
    }
  }

  static inline std::unique_ptr<Cluster> cluster_;
  static inline std::map<std::string, std::vector<NodeCard>> cards_;
  static inline std::string skip_, failure_;
};

// The slices of every node are stored as published (quantities come back in the form sent, so the node
// daemon's comparison sees no change), a 10-card node's pool spans two slices, an unhealthy card's
// devices carry the taint; and the node daemon's publisher, against this API server, finds its pool through
// the field selectors and publishes it again, a generation higher, after a slice is deleted.
TEST_F(DraApi, SlicesAreStoredAsPublishedAndPublishedAgainAfterADeletion) {
  for (const std::string node : {"api-node-0000", "api-node-0001", "api-node-0002"}) {
    for (const json& wanted : mgpu::dra::BuildSlices(node, cards_[node], Config(), 1)) {
      kube::ApiResult stored =
          Api().Get(kube::kResourceSlices, "", wanted["metadata"]["name"].get<std::string>());
      ASSERT_TRUE(stored.ok()) << stored.message();
      EXPECT_TRUE(mgpu::dra::SameSpec(*stored, wanted)) << stored->dump();
    }
  }
  std::vector<Card> wide;
  for (int i = 0; i < 10; ++i)
    wide.push_back({i, "GPU-wide-" + std::to_string(i), "NVIDIA H100 80GB HBM3", 81559, i != 3});
  std::vector<NodeCard> cards;
  for (const Card& c : wide)
    cards.push_back({c, 81559, "0000:" + std::to_string(10 + c.index) + ":00.0", {}});
  node::DeviceState state(wide);
  mgpu::dra::SlicePublisher publisher(Config(), "dra-wide", cards, Api(), state, "test");
  publisher.Start();
  ASSERT_TRUE(Poll([&] { return publisher.UpToDate(); }, kWait));
  const int64_t first = publisher.generation();
  kube::ApiResult listed =
      Api().List(kube::kResourceSlices, "", {.field_selector = "spec.nodeName=dra-wide"});
  ASSERT_TRUE(listed.ok()) << listed.message();
  ASSERT_EQ(listed->value("items", json::array()).size(), 2u);
  for (const json& s : (*listed)["items"]) {
    for (const json& d : s["spec"].value("devices", json::array()))
      EXPECT_EQ(d.contains("taints"), d["name"].get<std::string>().starts_with("gpu-3-")) << d["name"];
  }
  ASSERT_TRUE(Api().Delete(kube::kResourceSlices, "", "dra-wide-mgpu.io-devices-1").ok());
  ASSERT_TRUE(Poll([&] { return publisher.generation() > first && publisher.UpToDate(); }, kWait));
  EXPECT_TRUE(Api().Get(kube::kResourceSlices, "", "dra-wide-mgpu.io-devices-1").ok());
  publisher.Stop();
}

// mgpu's packing for DRA pods: pods written with mgpu-core / mgpu-memory in a DRA namespace reach the API
// server through /mutate with one mgpu.io/dra-gpu, which kube-scheduler (ignoredByScheduler) lets pass and for
// which it calls the extender's choose; the extender counts the claims it sees allocated and scores the
// nodes with mgpu's policy, and the allocator's first fit then fills the card. Five such pods, free to go
// to any of three empty nodes, share one card; kube-scheduler's own scores would spread them over the three.
// The webhook gives them the DRA profile (dra.schedulerName) of the shipped scheduler configuration, which
// schedules them.
TEST_F(DraApi, TheExtenderPacksDraPodsOntoOneCard) {
  if (kNodes < 12) GTEST_SKIP() << "uses api-node-0009 to 0011";
  ASSERT_TRUE(CreateNamespace("packed", {{"mgpu.io/dra", "enabled"}}).ok());
  const Config c;
  std::vector<json> pods;
  for (int k = 0; k < 5; ++k) {
    json pod = AmongThreeNodes("p" + std::to_string(k));
    json& container = pod["spec"]["containers"][0];
    container["resources"]["limits"] = {{c.Names().core, "20"}, {c.Names().memory, "4096"}};
    pods.push_back(pod);
  }
  const std::set<std::string> cards = PlaceInTurn("packed", pods);
  for (int k = 0; k < 5; ++k) {
    kube::ApiResult pod = Api().GetPod("packed", "p" + std::to_string(k));
    ASSERT_TRUE(pod.ok()) << pod.message();
    EXPECT_EQ((*pod)["spec"]["containers"][0]["resources"]["limits"], json({{c.Names().dra_resource, "1"}}));
    // Scheduled in the shipped configuration's DRA profile, which the webhook gave them.
    EXPECT_EQ((*pod)["spec"].value("schedulerName", ""), c.dra.scheduler_name);
  }
  EXPECT_EQ(cards.size(), 1u) << "the five pods hold " << json(cards).dump();
  ExpectRulesHold(Usage());
}

// Issue 42 point 4: pods whose claims were written by hand get mgpu's node choice too. In a namespace without
// the DRA label, five pods naming mgpu's class through a ResourceClaimTemplate (three) or a ResourceClaim
// (two), free to go to any of three nodes, reach the API server through /mutate-claims with one D/dra-gpu and
// their claim's share in D/dra-limits, and share one card, as /mutate's pods do (kube-scheduler's own scores
// would spread them over the three).
TEST_F(DraApi, HandWrittenClaimsArePackedAsMutatesPodsAre) {
  if (kNodes < 12) GTEST_SKIP() << "uses api-node-0009 to 0011";
  ASSERT_TRUE(CreateNamespace("byhand").ok());
  const Config c;
  const json spec = json::parse(R"({"devices": {"requests": [{"name": "gpu", "exactly":
      {"deviceClassName": "mgpu.io", "capacity": {"requests": {"cores": "20", "memory": "4Gi"}}}}]}})");
  ASSERT_TRUE(Api().Create(kube::kResourceClaimTemplates, "byhand", Template("t20", spec)).ok());
  std::vector<json> pods;
  for (int k = 0; k < 5; ++k) {
    const std::string name = "h" + std::to_string(k);
    json pod = AmongThreeNodes(name);
    json claim = {{"name", "gpu"}};
    if (k % 2 == 1) {
      claim["resourceClaimName"] = name;
      const json object = {{"apiVersion", "resource.k8s.io/v1"},
                           {"kind", "ResourceClaim"},
                           {"metadata", {{"name", name}}},
                           {"spec", spec}};
      ASSERT_TRUE(Api().Create(kube::kResourceClaims, "byhand", object).ok()) << name;
    } else {
      claim["resourceClaimTemplateName"] = "t20";
    }
    pod["spec"]["resourceClaims"] = json::array({claim});
    pod["spec"]["containers"][0]["resources"]["claims"] = json::array({{{"name", "gpu"}}});
    pods.push_back(pod);
  }
  const std::set<std::string> cards = PlaceInTurn("byhand", pods);
  for (int k = 0; k < 5; ++k) {
    kube::ApiResult pod = Api().GetPod("byhand", "h" + std::to_string(k));
    ASSERT_TRUE(pod.ok()) << pod.message();
    EXPECT_EQ((*pod)["spec"]["containers"][0]["resources"]["limits"], json({{c.Names().dra_resource, "1"}}));
    EXPECT_EQ(json::parse((*pod)["metadata"]["annotations"].value(c.Names().dra_limits, "null")),
              json({{"c", {{c.Names().core, "20"}, {c.Names().memory, "4096"}}}}));
    EXPECT_EQ((*pod)["spec"].value("schedulerName", ""), c.dra.scheduler_name);
  }
  EXPECT_EQ(cards.size(), 1u) << "the five pods hold " << json(cards).dump();
  ExpectRulesHold(Usage());
}

// Pods asking whole cards through mgpu.io/gpu, free to go to any of three nodes, get mgpu's node choice:
// /mutate-claims gives them D/dra-limits and the DRA profile, kube-scheduler calls the extender for
// mgpu.io/gpu (the shipped managedResources), and the extender fills a node's cards before it opens
// another, where kube-scheduler's own scores (LeastAllocated over the 8 CPUs each pod asks of 64) spread them.
TEST_F(DraApi, WholeCardsThroughTheExtendedResourceArePacked) {
  if (kNodes < 12) GTEST_SKIP() << "uses api-node-0009 to 0011";
  ASSERT_TRUE(CreateNamespace("extres").ok());
  const Config c;
  std::vector<json> pods;
  for (int k = 0; k < 2; ++k) {
    json pod = AmongThreeNodes("w" + std::to_string(k));
    json& resources = pod["spec"]["containers"][0]["resources"];
    resources["requests"]["cpu"] = "8";
    resources["limits"] = {{mgpu::dra::WholeCardResource(c), "1"}};
    pods.push_back(pod);
  }
  std::set<std::string> nodes;
  for (const std::string& card : PlaceInTurn("extres", pods)) nodes.insert(card.substr(0, card.find('/')));
  for (int k = 0; k < 2; ++k) {
    kube::ApiResult pod = Api().GetPod("extres", "w" + std::to_string(k));
    ASSERT_TRUE(pod.ok()) << pod.message();
    EXPECT_EQ((*pod)["spec"]["containers"][0]["resources"]["limits"],
              json({{mgpu::dra::WholeCardResource(c), "1"}}));
    EXPECT_EQ(json::parse((*pod)["metadata"]["annotations"].value(c.Names().dra_limits, "null")),
              json({{"c", {{c.Names().core, "100"}, {c.Names().memory, "1"}}}}));
    EXPECT_EQ((*pod)["spec"].value("schedulerName", ""), c.dra.scheduler_name);
  }
  EXPECT_EQ(nodes.size(), 1u) << "the two pods are on " << json(nodes).dump();
  ExpectRulesHold(Usage());
}

// On one node of two 24 GiB cards published with the opt-in six-device layout (dra.cards: any, each card's
// devices sharing a counter), claims of every shape land as the per-card rules say, because the
// scheduler itself keeps them: a second compute policy takes the other card, offline joins the online share,
// a whole card and a multi-card share find no card, native-burst-share none either; once the other card is
// free again a whole card takes it.
TEST_F(DraApi, ClaimsOfEveryShapeAreAllocatedByThePerCardRules) {
  ASSERT_TRUE(CreateNamespace("rules").ok());
  const std::string node = "api-node-0001";  // 2 x 24576 MiB
  ASSERT_TRUE(Publish(node, "any").ok());      // the opt-in six-device layout
  const Config c;
  const struct {
    const char* name;
    PodRequest shape;
  } claims[] = {
      {"fixed-30", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 30, 4096)},
      {"guaranteed-30", Shape(Qos::kOnline, ComputePolicy::kGuaranteedBurstShare, 30, 4096)},
      {"offline-40", Shape(Qos::kOffline, ComputePolicy::kFixedShare, 40, 2048)},
      {"whole", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 100, 24576, 1, true)},
      {"two-50", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 50, 8192, 2)},
      {"native-10", Shape(Qos::kOnline, ComputePolicy::kNativeBurstShare, 10, 1024)},
  };
  for (const auto& [name, shape] : claims) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}}},
                  {"spec", ClaimSpecFor(shape, shape.containers[0], c)}};
    kube::ApiResult created = Api().Create(kube::kResourceClaims, "rules", claim);
    ASSERT_TRUE(created.ok()) << name << ": " << created.message();
    ASSERT_TRUE(Api().Create(kube::kPods, "rules", ClaimPod(name, "", node, name)).ok()) << name;
    if (std::string(name) == "guaranteed-30" || std::string(name) == "fixed-30") WaitResults("rules", name);
  }
  const json fixed = WaitResults("rules", "fixed-30");
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_EQ(fixed[0]["device"], "gpu-0-fixed");
  EXPECT_EQ(fixed[0]["consumedCapacity"],
            json({{"cores", "30"}, {"memory", "4Gi"}, {"reclaimedCores", "0"}}));
  EXPECT_EQ(WaitResults("rules", "guaranteed-30")[0]["device"], "gpu-1-guaranteed");
  const json offline = WaitResults("rules", "offline-40");
  EXPECT_EQ(offline[0]["device"], "gpu-0-fixed");
  EXPECT_EQ(offline[0]["consumedCapacity"]["reclaimedCores"], "40");
  EXPECT_EQ(offline[0]["consumedCapacity"]["cores"], "0");
  for (const char* waiting : {"whole", "two-50", "native-10"}) {
    EXPECT_TRUE(Poll([&] { return !Unschedulable("rules", waiting).empty(); }, kWait)) << waiting;
    EXPECT_NE(Unschedulable("rules", waiting).find("cannot allocate all claims"), std::string::npos)
        << Unschedulable("rules", waiting);
    EXPECT_TRUE(ResultsOf("rules", waiting).is_null()) << waiting;
  }
  // The native share gives up, then the guaranteed one leaves: the freed card goes to the whole card (with
  // both waiting, the scheduler gives it to whichever it tries first).
  for (const char* gone : {"native-10", "guaranteed-30"}) {
    ASSERT_EQ(Sh(cluster_->kubectl() + " delete pod -n rules " + gone + " --grace-period=0 --force").rc, 0);
    ASSERT_TRUE(Api().Delete(kube::kResourceClaims, "rules", gone).ok());
  }
  const json whole = WaitResults("rules", "whole");
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0]["device"], "gpu-1-whole");
  ExpectRulesHold(Usage());
}

// A pod that asks a whole card through the extended resource mgpu.io/gpu (KEP-5004) gets one: the
// scheduler makes the claim itself, of class whole.mgpu.io (a `whole` device, or a one-variant card's device
// with all its memory). /mutate-claims leaves its resources as they are (given D/dra-gpu beside
// mgpu.io/gpu, v1.36.2's kube-scheduler finds no node for it: "cannot fit resource").
TEST_F(DraApi, TheExtendedResourceGetsAWholeCard) {
  ASSERT_TRUE(CreateNamespace("whole").ok());
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "x1"}}},
              {"spec",
               {{"containers",
                 {{{"name", "c"}, {"image", "x"}, {"resources", {{"limits", {{"mgpu.io/gpu", "1"}}}}}}}}}}};
  kube::ApiResult created = Api().Create(kube::kPods, "whole", pod);
  ASSERT_TRUE(created.ok()) << created.message();
  EXPECT_EQ((*created)["spec"]["containers"][0]["resources"]["limits"], json({{"mgpu.io/gpu", "1"}}));
  const json results = WaitResults("whole", "x1");
  ASSERT_EQ(results.size(), 1u) << Unschedulable("whole", "x1");
  const std::string node = results[0]["pool"];
  const auto device = mgpu::dra::ParseDeviceName(results[0]["device"].get<std::string>());
  ASSERT_TRUE(device) << results.dump();
  const auto card = std::find_if(cards_[node].begin(), cards_[node].end(),
                                 [&](const NodeCard& n) { return n.card.index == device->card_index; });
  ASSERT_NE(card, cards_[node].end());
  EXPECT_TRUE(device->variant == mgpu::dra::Variant::kWhole ||
              mgpu::dra::ReadConsumed(results[0])->memory_mib == card->capacity_mib)
      << results.dump();
}

// The seed scenarios through the real API server and the extender's /mutate: the Deployments of
// online-offline.yaml (their annotations on the Deployment, as Volcengine writes them) become pods whose GPU
// asks are claims of the Deployments' compute policy, online and offline as the qos_level says, all
// allocated; the EMR-style pod too; every pod of bad-requests.yaml is refused with the sentence /validate
// gives; and a claim that breaks a rule is refused at creation by /validate-claims.
TEST_F(DraApi, SeedScenariosThroughTheWebhook) {
  ASSERT_TRUE(CreateNamespace("seeds", {{"mgpu.io/dra", "enabled"}}).ok());
  const auto seed = [](const std::string& file) {
    std::string yaml = *ReadFile(kSeeds + file);
    for (size_t at; (at = yaml.find("vke.volcengine.com")) != std::string::npos;)
      yaml.replace(at, 18, "mgpu.io");
    return *YamlDocumentsToJson(yaml);
  };
  for (const char* file : {"online-offline.yaml", "emr-style.yaml"}) {
    for (json doc : seed(file)) {
      doc["metadata"]["namespace"] = "seeds";
      const kube::ApiResource& kind = doc["kind"] == "Deployment" ? kube::kDeployments : kube::kPods;
      kube::ApiResult r = Api().Create(kind, "seeds", doc);
      ASSERT_TRUE(r.ok()) << file << ": " << r.message();
    }
  }
  std::vector<json> pods;
  ASSERT_TRUE(Poll(
      [&] {
        kube::ApiResult list = Api().ListPods("seeds");
        pods = list.ok() ? list->value("items", json::array()).get<std::vector<json>>() : std::vector<json>();
        return pods.size() == 5;
      },
      kWait));
  int online = 0, offline = 0;
  for (const json& pod : pods) {
    const std::string name = pod["metadata"]["name"];
    EXPECT_FALSE(ParsePodRequest(pod, Config())->AsksForGpu())
        << name << " still asks device-plugin resources";
    EXPECT_EQ(pod["spec"]["resourceClaims"].size(), 1u) << name;
    const json results = WaitResults("seeds", name);
    ASSERT_EQ(results.size(), 1u) << name << ": " << Unschedulable("seeds", name);
    const auto device = mgpu::dra::ParseDeviceName(results[0]["device"].get<std::string>());
    ASSERT_TRUE(device) << results.dump();
    const json& consumed = results[0]["consumedCapacity"];
    EXPECT_EQ(consumed["memory"], "4Gi") << name;
    if (name.rfind("spark", 0) == 0) continue;
    EXPECT_EQ(mgpu::dra::PolicyOf(device->variant), ComputePolicy::kGuaranteedBurstShare) << name;
    if (consumed["reclaimedCores"] == "30") {
      ++offline;
      EXPECT_TRUE(mgpu::dra::OfflineShares(device->variant)) << name;
    } else {
      ++online;
      EXPECT_EQ(consumed["cores"], "30") << name;
    }
  }
  EXPECT_EQ(online, 2);
  EXPECT_EQ(offline, 2);

  int refused = 0;
  for (json pod : seed("bad-requests.yaml")) {
    const std::string name = pod["metadata"]["name"];
    pod["metadata"]["namespace"] = "seeds";
    kube::ApiResult r = Api().Create(kube::kPods, "seeds", pod);
    ASSERT_FALSE(r.ok()) << name << " was admitted";
    EXPECT_NE(r.message().find("denied the request"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(name), std::string::npos) << r.message();
    ++refused;
  }
  EXPECT_EQ(refused, 8);

  json bad = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "no-memory"}}},
      {"spec",
       json::parse(
           R"({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mgpu.io", "capacity": {"requests": {"cores": "30"}}}}]}})")}};
  kube::ApiResult refusal = Api().Create(kube::kResourceClaims, "seeds", bad);
  ASSERT_FALSE(refusal.ok());
  EXPECT_NE(refusal.message().find("ResourceClaim seeds/no-memory request gpu asks no memory"),
            std::string::npos)
      << refusal.message();
}

// Two claims per node (2,000 on 1,000 nodes at the issue's scale) of five shapes, placed by kube-scheduler's
// allocator: every pod gets its cards and no card holds more than it has, one device per card, a whole card
// alone, offline never beside a multi-card share.
TEST_F(DraApi, TwoClaimsPerNodeOverCommitNoCard) {
  ASSERT_TRUE(CreateNamespace("scale").ok());
  const Config c;
  const std::vector<std::pair<std::string, PodRequest>> shapes = {
      {"online-20", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 20, 4096)},
      {"guaranteed-50", Shape(Qos::kOnline, ComputePolicy::kGuaranteedBurstShare, 50, 8192)},
      {"offline-40", Shape(Qos::kOffline, ComputePolicy::kFixedShare, 40, 2048)},
      {"two-50", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 50, 8192, 2)},
      {"whole", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 100, 16384, 1, true)},
  };
  for (const auto& [name, shape] : shapes)
    ASSERT_TRUE(Api()
                    .Create(kube::kResourceClaimTemplates, "scale",
                            Template(name, ClaimSpecFor(shape, shape.containers[0], c)))
                    .ok());
  const int kPods = 2 * kNodes;
  ASSERT_EQ(Sh(cluster_->Script("pause") + " kube-scheduler").rc, 0);
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i; (i = next++) < kPods;)
        failed += !Api()
                       .Create(kube::kPods, "scale",
                               ClaimPod("p-" + std::to_string(i), shapes[i % shapes.size()].first))
                       .ok();
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(failed, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Sh(cluster_->Script("resume") + " kube-scheduler").rc, 0);
  int bound = 0;
  ASSERT_TRUE(Poll(
      [&] {
        kube::ApiResult pods = Api().ListPods("scale");
        bound = 0;
        for (const json& p : pods.ok() ? (*pods)["items"] : json::array())
          bound += !p["spec"].value("nodeName", "").empty();
        return bound == kPods;
      },
      kWait, 1s))
      << bound << " of " << kPods << " pods bound";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::map<std::string, CardSum> usage = Usage();
  ExpectRulesHold(usage);
  int scale_claims = 0;
  for (const auto& [card, s] : usage) scale_claims += s.claims;
  EXPECT_GE(scale_claims, kPods);
  std::printf(
      "%d DRA pods on %d nodes: bound in %.0f s (%.1f pods/s, this machine, under load), %zu cards used\n",
      kPods, kNodes, seconds, kPods / seconds, usage.size());
}

// dra.cards naming one variant (docs/dra.md §2): one device per card and no counters, and the per-card rules
// still hold, kept by the scheduler. On a node of `fixed` cards an online and an offline share join on one
// card, a claim of the whole class takes the other card whole (it consumes all the memory, so a later share
// goes beside the first two), and a multi-card or a guaranteed-burst-share claim finds no card; on a node of
// `fixed-online` cards the multi-card share lands on both cards and an offline one finds none.
TEST_F(DraApi, OneDevicePerCardKeepsTheRulesWithoutCounters) {
  // Two 2 x 24 GiB nodes holding nothing: the scale test's pods (if it ran) leave first.
  ASSERT_EQ(
      Sh(cluster_->kubectl() + " delete pods -n scale --all --grace-period=0 --force --ignore-not-found").rc,
      0);
  ASSERT_TRUE(Poll(
      [] {
        kube::ApiResult claims = Api().List(kube::kResourceClaims, "scale");
        return claims.ok() && claims->value("items", json::array()).empty();
      },
      kWait));
  const std::map<std::string, CardSum> used = Usage();
  const auto holds_claims = [&](const std::string& node) {
    auto it = used.lower_bound(node + "/");
    return it != used.end() && it->first.starts_with(node + "/");
  };
  std::vector<std::string> free;
  for (int i = 4; i < kNodes && free.size() < 2; i += 3) {  // api-node-0004, -0007, ...: 2 x 24 GiB
    char name[32];
    std::snprintf(name, sizeof name, "api-node-%04d", i);
    if (!holds_claims(name)) free.push_back(name);
  }
  ASSERT_EQ(free.size(), 2u) << "two 2 x 24 GiB nodes without claims (MGPU_DRA_API_NODES >= 11)";
  const std::string fixed_node = free[0], online_node = free[1];
  Config fixed_cards, online_cards;
  fixed_cards.dra.cards = "fixed";
  online_cards.dra.cards = "fixed-online";
  ASSERT_TRUE(mgpu::dra::PublishOnce(Api(), fixed_node, cards_[fixed_node], fixed_cards).ok());
  ASSERT_TRUE(mgpu::dra::PublishOnce(Api(), online_node, cards_[online_node], online_cards).ok());

  ASSERT_TRUE(CreateNamespace("one").ok());
  const Config c;
  const auto claim = [&](const std::string& name, const PodRequest& shape, const std::string& node) {
    json object = {{"apiVersion", "resource.k8s.io/v1"},
                   {"kind", "ResourceClaim"},
                   {"metadata", {{"name", name}}},
                   {"spec", ClaimSpecFor(shape, shape.containers[0], c)}};
    ASSERT_TRUE(Api().Create(kube::kResourceClaims, "one", object).ok()) << name;
    ASSERT_TRUE(Api().Create(kube::kPods, "one", ClaimPod(name, "", node, name)).ok()) << name;
  };
  claim("fixed-30", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 30, 4096), fixed_node);
  const json online = WaitResults("one", "fixed-30");
  ASSERT_EQ(online.size(), 1u);
  EXPECT_EQ(online[0]["device"], "gpu-0-fixed");
  claim("offline-40", Shape(Qos::kOffline, ComputePolicy::kFixedShare, 40, 2048), fixed_node);
  EXPECT_EQ(WaitResults("one", "offline-40")[0]["device"], "gpu-0-fixed");
  claim("whole", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 100, 24576, 1, true), fixed_node);
  const json whole = WaitResults("one", "whole");
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0]["device"], "gpu-1-fixed");
  EXPECT_EQ(whole[0]["consumedCapacity"]["memory"], "24Gi");
  claim("fixed-10", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 10, 1024), fixed_node);
  EXPECT_EQ(WaitResults("one", "fixed-10")[0]["device"], "gpu-0-fixed") << "the whole card took a share";
  claim("two-50", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 50, 8192, 2), fixed_node);
  claim("guaranteed-30", Shape(Qos::kOnline, ComputePolicy::kGuaranteedBurstShare, 30, 4096), fixed_node);

  claim("two-50-online", Shape(Qos::kOnline, ComputePolicy::kFixedShare, 50, 8192, 2), online_node);
  const json multi = WaitResults("one", "two-50-online");
  ASSERT_EQ(multi.size(), 2u);
  EXPECT_EQ(std::set<std::string>({multi[0]["device"], multi[1]["device"]}),
            std::set<std::string>({"gpu-0-fixed-online", "gpu-1-fixed-online"}));
  claim("offline-online", Shape(Qos::kOffline, ComputePolicy::kFixedShare, 40, 2048), online_node);
  for (const char* waiting : {"two-50", "guaranteed-30", "offline-online"}) {
    EXPECT_TRUE(Poll([&] { return !Unschedulable("one", waiting).empty(); }, kWait)) << waiting;
    EXPECT_TRUE(ResultsOf("one", waiting).is_null()) << waiting;
  }
  ExpectRulesHold(Usage());
}

}  // namespace
}  // namespace mgpu::testing::dra
