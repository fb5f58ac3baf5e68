// Everything under deploy/ agrees with the code, since kubectl cannot validate it offline. Every YAML file is
// Prometheus configuration (promtool checks it in tests/monitoring/), a kustomization (kubectl kustomize must
// render exactly the manifests below, base and both scheduler-mode overlays), Kubernetes manifests (each
// document with apiVersion, kind and a name), an mgpu config file (loads with the daemons' own loader) or a
// sample-nodes file; files added later are covered the same way. Across the manifests: namespaced objects sit
// in mgpu's namespace, the ConfigMaps and ServiceAccounts that workloads and bindings name exist, every
// embedded mgpu config loads, and every KubeSchedulerConfiguration reaches the extender's Service on the port
// the extender listens on, with verbs a running extender serves and managed resources equal to those the
// device plugin registers. Every daemon has a Dockerfile on Debian 12, and the mgpu images the manifests run
// carry the project's version. The extender serves HTTPS with the Secret scripts/certs.sh makes, whose
// certificate names the Service that kube-scheduler and the admission webhook call; the webhook reaches a
// path the extender answers, and is safe for the cluster (Ignore on failure, no side effects, only pods and
// workloads asking for mgpu resources sent). Every Service selects a workload's pods on ports they declare.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/config.h"
#include "common/dra.h"
#include "common/file.h"
#include "common/manifest.h"
#include "common/yaml_json.h"
#include "deviceplugin/devices.h"
#include "extender/daemon.h"
#include "node/static_backend.h"
#include "support/test_certs.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

namespace mgpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDeploy = fs::path(MGPU_SOURCE_DIR) / "deploy";
const fs::path kCertsScript = fs::path(MGPU_SOURCE_DIR) / "scripts" / "certs.sh";

std::string ReadText(const std::string& path) {
  Result<std::string> text = mgpu::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.message();
  return text.ok() ? *text : "";
}

std::string Relative(const fs::path& path) { return fs::relative(path, kDeploy).string(); }

struct Object {
  std::string file;  // relative to deploy/
  json doc;
  std::string Kind() const { return doc.value("kind", ""); }
  std::string Name() const { return doc.value("metadata", json::object()).value("name", ""); }
  std::string Namespace() const { return doc.value("metadata", json::object()).value("namespace", ""); }
};

// A component config embedded in a ConfigMap, or a file of its own.
struct SchedulerConfig {
  std::string where;
  json doc;
};

const std::set<std::string> kClusterScoped = {"Namespace",
                                              "ClusterRole",
                                              "ClusterRoleBinding",
                                              "PriorityClass",
                                              "CustomResourceDefinition",
                                              "RuntimeClass",
                                              "ValidatingWebhookConfiguration",
                                              "MutatingWebhookConfiguration",
                                              "DeviceClass"};
const std::set<std::string> kComponentConfigs = {"KubeSchedulerConfiguration"};
const std::set<std::string> kWorkloads = {"Deployment", "DaemonSet", "StatefulSet", "Job"};

// Every YAML file under deploy/, sorted into manifests, mgpu configs and sample nodes.
class Deploy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(kDeploy)) {
      const std::string ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& path : files) {
      if (path.parent_path().filename() == "patches") {
        ++patch_files_;
        continue;  // an overlay's partial objects: checked as that overlay renders them
      }
      const std::string text = ReadText(path);
      Result<std::vector<json>> docs = YamlDocumentsToJson(text);
      ASSERT_TRUE(docs.ok()) << Relative(path) << ": " << docs.message();
      ASSERT_FALSE(docs->empty()) << Relative(path) << " is empty";
      const json& first = docs->front();
      if (first.is_object() && (first.contains("groups") || first.contains("scrape_configs"))) {
        continue;  // Prometheus rules and scrape configuration: tests/monitoring/ runs promtool on them
      }
      if (first.is_object() && first.value("kind", "") == "Kustomization") {
        kustomizations_.push_back(Relative(path.parent_path()));
        continue;  // rendered by kubectl kustomize in KustomizeRendersExactlyTheManifests
      }
      if (first.is_object() && first.contains("apiVersion")) {
        for (const json& doc : *docs) objects_.push_back({Relative(path), doc});
      } else if (first.is_object() && first.contains("cards")) {
        Result<std::vector<Card>> cards = node::StaticBackend::ParseCards(text, Relative(path));
        EXPECT_TRUE(cards.ok()) << Relative(path) << " (a static inventory): " << cards.message();
        ++inventories_;
      } else if (first.is_array()) {
        Result<std::vector<SampleNode>> nodes = SampleNodesOf(text);
        EXPECT_TRUE(nodes.ok()) << Relative(path) << " (sample nodes): " << nodes.message();
      } else {
        Result<Config> config = ParseConfig(text, Relative(path));
        EXPECT_TRUE(config.ok()) << "neither manifests nor sample nodes, so an mgpu config, but: "
                                 << config.message();
        ++config_files_;
      }
    }
  }

  static void TearDownTestSuite() {
    objects_.clear();
    kustomizations_.clear();
    config_files_ = 0;
  }

  static std::vector<Object> Objects() { return objects_; }
  static const Object* Find(const std::string& kind, const std::string& ns, const std::string& name) {
    for (const Object& o : objects_)
      if (o.Kind() == kind && o.Namespace() == ns && o.Name() == name) return &o;
    return nullptr;
  }
  // Outside deploy/examples/ (workloads for users to copy).
  static bool Operational(const Object& o) { return o.file.rfind("examples/", 0) != 0; }

  // mgpu's namespace: the one Namespace deploy/ creates.
  static std::string MgpuNamespace() {
    std::string ns;
    for (const Object& o : objects_) {
      if (o.Kind() == "Namespace") {
        EXPECT_TRUE(ns.empty()) << "deploy/ creates more than one Namespace";
        ns = o.Name();
      }
    }
    return ns;
  }

  // Every mgpu config (ConfigMap data entries that are not component configs) and every scheduler config.
  static void EmbeddedConfigs(std::map<std::string, Config>& mgpu, std::vector<SchedulerConfig>& schedulers) {
    for (const Object& o : objects_) {
      if (kComponentConfigs.count(o.Kind())) schedulers.push_back({o.file, o.doc});
      if (o.Kind() != "ConfigMap") continue;
      const json data = o.doc.value("data", json::object());
      for (const auto& [key, value] : data.items()) {
        const std::string where = o.file + ": ConfigMap " + o.Name() + " " + key;
        Result<std::vector<json>> docs = YamlDocumentsToJson(value.get<std::string>());
        ASSERT_TRUE(docs.ok()) << where << ": " << docs.message();
        if (docs->size() == 1 && docs->front().is_object() && docs->front().contains("apiVersion")) {
          EXPECT_TRUE(kComponentConfigs.count(docs->front().value("kind", ""))) << where;
          schedulers.push_back({where, docs->front()});
          continue;
        }
        Result<Config> config = ParseConfig(value.get<std::string>(), where);
        ASSERT_TRUE(config.ok()) << config.message();
        mgpu.emplace(o.Name(), *config);
      }
    }
  }

  // Whether the Deployment `name` mounts a Secret volume at `path` in one of its containers.
  static bool MountsSecretAt(const std::string& name, const std::string& path) {
    for (const Object& o : objects_) {
      if (o.Kind() != "Deployment" || o.Name() != name) continue;
      const json& pod = o.doc["spec"]["template"]["spec"];
      std::set<std::string> secrets;
      for (const json& v : pod.value("volumes", json::array()))
        if (v.contains("secret")) secrets.insert(v.value("name", ""));
      for (const json& c : pod.value("containers", json::array()))
        for (const json& m : c.value("volumeMounts", json::array()))
          if (m.value("mountPath", "") == path && secrets.count(m.value("name", ""))) return true;
    }
    return false;
  }

  static inline std::vector<Object> objects_;
  static inline std::vector<std::string> kustomizations_;  // their folders, relative to deploy/
  static inline int config_files_ = 0;
  static inline int patch_files_ = 0;
  static inline int inventories_ = 0;
};

// kubectl for `kubectl kustomize`: MGPU_KUBECTL, else the v1.36.2 one of ../shared/k8s/ (scripts/cluster.sh
// binaries unpacks it once), else the one on PATH. Empty, with the reason in *why, when there is none or it
// is older than 1.21: the kustomize inside kubectl 1.20 (Debian 12's kubernetes-client) cannot read folders
// under `resources:`, which deploy/ lists there (`bases:` is deprecated).
std::string Kubectl(std::string* why) {
  const char* env = std::getenv("MGPU_KUBECTL");
  std::string kubectl = env && *env ? env : "";
  testing::TempDir dir;
  if (kubectl.empty()) {
    const std::string out = dir.path() + "/bin";
    if (std::system(("bash " + (fs::path(MGPU_SOURCE_DIR) / "scripts" / "cluster.sh").string() +
                     " binaries --state-dir " + dir.path() + " > " + out + " 2> /dev/null")
                        .c_str()) == 0) {
      std::string bin = ReadText(out);
      while (!bin.empty() && bin.back() == '\n') bin.pop_back();
      if (fs::exists(bin + "/kubectl")) kubectl = bin + "/kubectl";
    }
  }
  if (kubectl.empty() && std::system("command -v kubectl > /dev/null 2>&1") == 0) kubectl = "kubectl";
  if (kubectl.empty()) {
    *why = "no kubectl (the archives of ../shared/k8s/, or a kubectl 1.21 or later on PATH)";
    return "";
  }
  const std::string version = dir.path() + "/version.json";
  int minor = 0;
  if (std::system((kubectl + " version --client -o json > " + version + " 2> /dev/null").c_str()) == 0) {
    const json v = json::parse(ReadText(version), nullptr, false);
    if (v.contains("clientVersion")) minor = std::atoi(v["clientVersion"].value("minor", "0").c_str());
  }
  if (minor < 21) {
    *why = kubectl +
           " is older than 1.21, and its kustomize cannot read the folders deploy/ lists under "
           "resources (set MGPU_KUBECTL to a newer kubectl)";
    return "";
  }
  return kubectl;
}

// The objects `kubectl kustomize deploy/<root>` renders.
std::vector<json> Render(const std::string& kubectl, const std::string& root) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/out.yaml", err = dir.path() + "/err.txt";
  const int rc =
      std::system((kubectl + " kustomize " + (kDeploy / root).string() + " > " + out + " 2> " + err).c_str());
  EXPECT_EQ(rc, 0) << root << ": " << ReadText(err);
  Result<std::vector<json>> docs = YamlDocumentsToJson(ReadText(out));
  EXPECT_TRUE(docs.ok()) << root << ": " << docs.message();
  return rc == 0 && docs.ok() ? *docs : std::vector<json>();
}

const json* RenderedObject(const std::vector<json>& docs, const std::string& kind, const std::string& name) {
  for (const json& d : docs)
    if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return &d;
  return nullptr;
}

TEST_F(Deploy, EveryManifestHasApiVersionKindAndName) {
  ASSERT_FALSE(Objects().empty());
  for (const Object& o : Objects()) {
    EXPECT_TRUE(o.doc["apiVersion"].is_string()) << o.file;
    EXPECT_FALSE(o.Kind().empty()) << o.file << ": a document without kind";
    if (!kComponentConfigs.count(o.Kind())) {
      EXPECT_FALSE(o.Name().empty()) << o.file << ": a " << o.Kind() << " without metadata.name";
    }
  }
  EXPECT_GE(config_files_, 1) << "deploy/examples/config.yaml documents every key";
}

TEST_F(Deploy, NamespacedObjectsLiveInMgpusNamespace) {
  const std::string ns = MgpuNamespace();
  ASSERT_FALSE(ns.empty()) << "deploy/ creates no Namespace";
  for (const Object& o : Objects()) {
    if (!Operational(o) || kClusterScoped.count(o.Kind()) || kComponentConfigs.count(o.Kind())) continue;
    // Reading the API server's authentication config is granted in kube-system, where that Role lives.
    const bool auth_reader =
        o.Kind() == "RoleBinding" && o.Namespace() == "kube-system" &&
        o.doc["roleRef"].value("name", "") == "extension-apiserver-authentication-reader";
    if (!auth_reader) {
      EXPECT_EQ(o.Namespace(), ns) << o.file << ": " << o.Kind() << " " << o.Name();
    }
  }
}

TEST_F(Deploy, WorkloadsAndBindingsNameObjectsThatExist) {
  for (const Object& o : Objects()) {
    if (!Operational(o)) continue;
    if (kWorkloads.count(o.Kind())) {
      const json& pod = o.doc["spec"]["template"]["spec"];
      if (pod.contains("serviceAccountName")) {
        EXPECT_TRUE(Find("ServiceAccount", o.Namespace(), pod["serviceAccountName"]))
            << o.file << ": " << o.Kind() << " " << o.Name() << " runs as a missing ServiceAccount";
      }
      for (const json& volume : pod.value("volumes", json::array())) {
        if (volume.contains("secret")) {
          EXPECT_NE(ReadText(kCertsScript).find("name: " + volume["secret"].value("secretName", "") + "\n"),
                    std::string::npos)
              << o.file << ": " << o.Kind() << " " << o.Name()
              << " mounts a Secret scripts/certs.sh does not make";
        }
        if (!volume.contains("configMap")) continue;
        EXPECT_TRUE(Find("ConfigMap", o.Namespace(), volume["configMap"]["name"]))
            << o.file << ": " << o.Kind() << " " << o.Name() << " mounts a missing ConfigMap "
            << volume["configMap"]["name"];
      }
    }
    if (o.Kind() == "RoleBinding" || o.Kind() == "ClusterRoleBinding") {
      for (const json& subject : o.doc.value("subjects", json::array())) {
        if (subject.value("kind", "") != "ServiceAccount") continue;
        EXPECT_TRUE(Find("ServiceAccount", subject.value("namespace", ""), subject.value("name", "")))
            << o.file << ": " << o.Kind() << " " << o.Name() << " binds a missing ServiceAccount";
      }
      const json& role = o.doc["roleRef"];
      if (role.value("name", "").rfind("system:", 0) == 0 ||
          role.value("name", "").rfind("extension-", 0) == 0)
        continue;  // built into Kubernetes
      const std::string role_ns = role.value("kind", "") == "Role" ? o.Namespace() : "";
      EXPECT_TRUE(Find(role.value("kind", ""), role_ns, role.value("name", "")))
          << o.file << ": " << o.Kind() << " " << o.Name() << " refers to a missing "
          << role.value("kind", "");
    }
  }
}

// Every Service selects the pods of a workload in its namespace, on ports those pods declare.
TEST_F(Deploy, ServicesSelectWorkloadsAndTheirPorts) {
  for (const Object& service : Objects()) {
    if (service.Kind() != "Service" || !Operational(service)) continue;
    SCOPED_TRACE(service.file + ": Service " + service.Name());
    const json selector = service.doc["spec"].value("selector", json::object());
    ASSERT_FALSE(selector.empty());
    const json* pod = nullptr;
    for (const Object& o : objects_) {
      if (!kWorkloads.count(o.Kind()) || o.Namespace() != service.Namespace()) continue;
      const json labels = o.doc["spec"]["template"]["metadata"].value("labels", json::object());
      bool selected = true;
      for (const auto& [key, value] : selector.items()) selected &= labels.value(key, json()) == value;
      if (selected) pod = &o.doc["spec"]["template"]["spec"];
    }
    ASSERT_TRUE(pod) << "selects no workload's pods";
    for (const json& p : service.doc["spec"]["ports"]) {
      const json target = p.value("targetPort", json(p.value("port", 0)));
      bool declared = false;
      for (const json& c : (*pod)["containers"])
        for (const json& cp : c.value("ports", json::array()))
          declared |=
              target.is_string() ? cp.value("name", "") == target : cp.value("containerPort", 0) == target;
      EXPECT_TRUE(declared) << "targetPort " << target << " is not a port of the selected pods";
    }
  }
}

TEST_F(Deploy, MgpuImagesCarryTheProjectVersion) {
  int images = 0;
  for (const Object& o : Objects()) {
    if (!kWorkloads.count(o.Kind())) continue;
    for (const json& c : o.doc["spec"]["template"]["spec"].value("containers", json::array())) {
      const std::string image = c.value("image", "");
      if (image.rfind("mgpu/", 0) != 0) continue;
      ++images;
      EXPECT_EQ(image.substr(image.find(':') + 1), MGPU_VERSION) << o.file << ": " << image;
    }
  }
  EXPECT_GE(images, 1);
}

TEST_F(Deploy, SchedulerConfigsMatchWhatTheExtenderServesAndThePluginRegisters) {
  std::map<std::string, Config> mgpu;
  std::vector<SchedulerConfig> schedulers;
  EmbeddedConfigs(mgpu, schedulers);
  ASSERT_EQ(mgpu.size(), 1u) << "one mgpu config for both daemons";
  const Config& config = mgpu.begin()->second;
  EXPECT_TRUE(config.extender.leader_election) << "the extender Deployment runs replicas";
  ASSERT_GE(schedulers.size(), 2u) << "both the replacement and the second-scheduler mode";

  // The extender serves TLS from files the extender Deployment mounts from a Secret.
  ASSERT_FALSE(config.extender.tls_cert_file.empty()) << "the extender serves HTTPS";
  for (const std::string& file : {config.extender.tls_cert_file, config.extender.tls_key_file})
    EXPECT_TRUE(MountsSecretAt("mgpu-scheduler-extender", fs::path(file).parent_path().string())) << file;

  // A running extender with this config (and a test certificate), to ask which verbs it serves.
  testing::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  testing::TempDir dir;
  Result<testing::TestCerts> certs = testing::GenerateTestCerts(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.message();
  Config local = config;
  local.extender.listen_address = "127.0.0.1:0";
  local.extender.leader_election = false;
  local.extender.tls_cert_file = certs->server_cert;
  local.extender.tls_key_file = certs->server_key;
  extender::Daemon daemon(local);
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  ASSERT_TRUE(daemon.Start(cluster).ok());
  httplib::SSLClient http("127.0.0.1", daemon.port());
  http.set_ca_cert_path(certs->ca_cert.c_str());

  const ResourceNames names = config.Names();
  std::set<std::string> registered;
  for (mgpu::Resource r : mgpu::kAllResources) registered.insert(mgpu::FullName(r, names));
  const std::string listen_port =
      config.extender.listen_address.substr(config.extender.listen_address.rfind(':') + 1);

  // The replacement-mode file has the profile the webhooks give DRA pods (dra.schedulerName), beside the
  // default one, which every other pod keeps.
  bool replacement_found = false;
  for (const SchedulerConfig& s : schedulers) {
    if (s.where.find("extender/scheduler-config.yaml") == std::string::npos) continue;
    replacement_found = true;
    std::map<std::string, json> profiles;
    for (const json& p : s.doc.value("profiles", json::array())) profiles[p.value("schedulerName", "")] = p;
    EXPECT_TRUE(profiles.count("default-scheduler")) << "plain pods keep the default profile";
    ASSERT_FALSE(config.dra.scheduler_name.empty());
    ASSERT_TRUE(profiles.count(config.dra.scheduler_name))
        << "dra.schedulerName " << config.dra.scheduler_name << " is no profile: DRA pods would stay pending";
    EXPECT_TRUE(profiles[config.dra.scheduler_name].contains("percentageOfNodesToScore"));
  }
  EXPECT_TRUE(replacement_found);

  for (const SchedulerConfig& s : schedulers) {
    SCOPED_TRACE(s.where);
    ASSERT_TRUE(s.doc["extenders"].is_array());
    ASSERT_GE(s.doc["extenders"].size(), 1u);
    // The first entry chooses and binds (only one extender may bind); any other one is the ignorable entry
    // for CPU-only pods, after it so that a GPU pod reaches it with the one node chosen.
    for (size_t k = 0; k < s.doc["extenders"].size(); ++k) {
      SCOPED_TRACE("extender " + std::to_string(k));
      const json& e = s.doc["extenders"][k];
      // urlPrefix: http://<service>.<namespace>.svc:<port>, no path.
      std::smatch m;
      const std::string url = e.value("urlPrefix", "");
      ASSERT_TRUE(std::regex_match(url, m, std::regex(R"(https?://([a-z0-9-]+)\.([a-z0-9-]+)\.svc:(\d+))")))
          << url;
      const Object* service = Find("Service", m[2], m[1]);
      ASSERT_TRUE(service) << "urlPrefix names a missing Service " << m[2] << "/" << m[1];
      bool port_found = false;
      for (const json& p : service->doc["spec"]["ports"]) {
        if (std::to_string(p.value("port", 0)) != m[3].str()) continue;
        port_found = true;
        // The Service's targetPort leads to the extender's listen port.
        const json target = p.value("targetPort", json(p.value("port", 0)));
        for (const Object& o : Objects()) {
          if (o.Kind() != "Deployment" || o.Namespace() != service->Namespace()) continue;
          for (const json& c : o.doc["spec"]["template"]["spec"]["containers"]) {
            for (const json& cp : c.value("ports", json::array())) {
              if (target.is_string() ? cp.value("name", "") == target
                                     : cp.value("containerPort", 0) == target) {
                EXPECT_EQ(std::to_string(cp.value("containerPort", 0)), listen_port) << o.Name();
              }
            }
          }
        }
      }
      EXPECT_TRUE(port_found) << "Service " << m[1] << " has no port " << m[3];
      EXPECT_EQ(e.value("enableHTTPS", false), url.rfind("https", 0) == 0);
      EXPECT_TRUE(e.value("enableHTTPS", false)) << "the extender serves HTTPS";
      const json tls = e.value("tlsConfig", json::object());
      EXPECT_TRUE(tls.contains("caFile") || tls.contains("caData"))
          << "the scheduler must trust certs.sh's CA";
      if (tls.contains("serverName")) {
        EXPECT_EQ(tls["serverName"], m[1].str() + "." + m[2].str() + ".svc");
      }
      EXPECT_TRUE(e.value("nodeCacheCapable", false)) << "the extender keeps its own node cache";
      if (k > 0) {
        EXPECT_EQ(e.value("filterVerb", ""), "choose-cpu-only");
        for (const char* verb : {"bindVerb", "preemptVerb", "prioritizeVerb", "managedResources"})
          EXPECT_FALSE(e.contains(verb)) << verb;
        EXPECT_TRUE(e.value("ignorable", false)) << "CPU-only pods are scheduled while the extender is down";
        httplib::Result res = http.Post("/choose-cpu-only", "{}", "application/json");
        ASSERT_TRUE(res);
        EXPECT_NE(res->status, 404) << "choose-cpu-only is not served by the extender";
        continue;
      }
      EXPECT_FALSE(e.value("ignorable", true)) << "GPU pods wait for the extender";

      // One call per pod as shipped (choose, no prioritizeVerb); the two-verb mode the comments describe
      // (filter and prioritize) is served as well.
      EXPECT_EQ(e.value("filterVerb", ""), "choose");
      EXPECT_FALSE(e.contains("prioritizeVerb")) << "choose answers one node: nothing to score";
      for (const char* verb : {"filterVerb", "bindVerb", "preemptVerb"}) {
        ASSERT_TRUE(e.contains(verb)) << verb;
        httplib::Result res = http.Post("/" + e[verb].get<std::string>(), "{}", "application/json");
        ASSERT_TRUE(res);
        EXPECT_NE(res->status, 404) << verb << " " << e[verb] << " is not served by the extender";
      }
      for (const char* path : {"/filter", "/prioritize"}) {
        httplib::Result res = http.Post(path, "{}", "application/json");
        ASSERT_TRUE(res);
        EXPECT_NE(res->status, 404) << path << " is not served by the extender";
      }
      // The configured domain's resources, and the Volcengine names too (resourceDomain: vke.volcengine.com
      // needs no edit here); and under both, D/dra-gpu, which only routes DRA pods here (no node has it), and
      // D/gpu, whole cards through DRA's extended resource (the claim kube-scheduler makes).
      Config volcengine = config;
      volcengine.resource_domain = "vke.volcengine.com";
      std::set<std::string> both = registered,
                            routing = {names.dra_resource, volcengine.Names().dra_resource};
      for (mgpu::Resource r : mgpu::kAllResources) both.insert(mgpu::FullName(r, volcengine.Names()));
      both.insert(routing.begin(), routing.end());
      for (const Config& c : {config, volcengine}) both.insert(mgpu::dra::WholeCardResource(c));
      if (!e.contains("managedResources")) {
        // One entry for every pod (the candidates of docs/placement.md): the routing resources,
        // which no node has, must then be ignored by kube-scheduler's own fit check in every profile.
        ASSERT_TRUE(s.doc.contains("profiles"))
            << "no managedResources and no NodeResourcesFit ignoredResources";
        for (const json& profile : s.doc["profiles"]) {
          std::set<std::string> ignored;
          for (const json& pc : profile.value("pluginConfig", json::array()))
            if (pc.value("name", "") == "NodeResourcesFit")
              for (const json& r : pc["args"].value("ignoredResources", json::array())) ignored.insert(r);
          EXPECT_EQ(ignored, routing)
              << "NodeResourcesFit must ignore the DRA routing resources, and only them";
        }
      } else {
        std::set<std::string> managed;
        for (const json& r : e["managedResources"]) {
          const std::string name = r.value("name", "");
          managed.insert(name);
          if (routing.count(name)) {
            EXPECT_TRUE(r.value("ignoredByScheduler", false)) << name << ": no node advertises it";
          } else {
            EXPECT_FALSE(r.value("ignoredByScheduler", true))
                << "kube-scheduler must also check node allocatable";
          }
        }
        EXPECT_EQ(managed, both);
      }
      std::smatch timeout;
      const std::string http_timeout = e.value("httpTimeout", "5s");
      ASSERT_TRUE(std::regex_match(http_timeout, timeout, std::regex(R"((\d+)s)"))) << http_timeout;
      EXPECT_GT(std::stoll(timeout[1]) * 1000, config.extender.bind_wait_ms) << "a bind may wait bindWaitMs";
    }
  }
  daemon.Stop();
}

TEST_F(Deploy, EveryDaemonHasADebian12Dockerfile) {
  std::set<std::string> built;
  for (const auto& entry : fs::directory_iterator(kDeploy / "docker")) {
    if (entry.path().extension() != ".Dockerfile") continue;
    std::istringstream in(ReadText(entry.path()));
    std::string last_from;
    std::map<std::string, std::string> args;  // ARG NAME=default, which a FROM may name as ${NAME}
    const std::regex arg(R"(ARG ([A-Za-z_]\w*)=(\S+))"), reference(R"(\$\{([A-Za-z_]\w*)\})");
    for (std::string line; std::getline(in, line);) {
      if (std::smatch m; std::regex_match(line, m, arg)) args[m[1]] = m[2];
      if (line.rfind("FROM ", 0) == 0) {
        last_from.clear();
        std::string rest = line;
        for (std::smatch m; std::regex_search(rest, m, reference); rest = m.suffix())
          last_from += m.prefix().str() + args[m[1]];
        last_from += rest;
      }
      for (const char* daemon : {"mgpu-scheduler-extender", "mgpu-device-plugin"})
        if (line.rfind("ENTRYPOINT", 0) == 0 && line.find(daemon) != std::string::npos) built.insert(daemon);
    }
    EXPECT_EQ(last_from.rfind("FROM debian:12", 0), 0u) << Relative(entry.path()) << " runs on " << last_from;
  }
  EXPECT_EQ(built, (std::set<std::string>{"mgpu-scheduler-extender", "mgpu-device-plugin"}));
}

// `kubectl kustomize` (Debian's kubernetes-client, or MGPU_KUBECTL) renders deploy/, its base and both
// scheduler-mode overlays to exactly the objects of deploy/'s files, which the tests above check; the
// generated ConfigMaps carry the monitoring files as they are. Together the overlays cover every manifest.
TEST_F(Deploy, KustomizeRendersExactlyTheManifests) {
  std::string why;
  const std::string kubectl = Kubectl(&why);
  if (kubectl.empty()) GTEST_SKIP() << why;
  const std::vector<std::string> roots = {".", "base", "overlays/scheduler-extender",
                                          "overlays/second-scheduler", "dra"};
  for (const std::string& root : roots) {
    EXPECT_NE(std::find(kustomizations_.begin(), kustomizations_.end(), root), kustomizations_.end()) << root;
  }
  testing::TempDir dir;
  std::map<std::string, std::set<std::string>> rendered;  // root -> "Kind namespace/name"
  for (const std::string& root : roots) {
    SCOPED_TRACE(root);
    const std::string out = dir.path() + "/out.yaml", err = dir.path() + "/err.txt";
    ASSERT_EQ(std::system(
                  (kubectl + " kustomize " + (kDeploy / root).string() + " > " + out + " 2> " + err).c_str()),
              0)
        << ReadText(err);
    Result<std::vector<json>> docs = YamlDocumentsToJson(ReadText(out));
    ASSERT_TRUE(docs.ok()) << docs.message();
    for (const json& doc : *docs) {
      const Object o{root, doc};
      rendered[root].insert(o.Kind() + " " + o.Namespace() + "/" + o.Name());
      if (const Object* file = Find(o.Kind(), o.Namespace(), o.Name())) {
        EXPECT_EQ(doc, file->doc) << o.Kind() << " " << o.Name() << " differs from " << file->file;
        continue;
      }
      ASSERT_EQ(o.Kind(), "ConfigMap") << o.Name() << " is in no file under deploy/";
      ASSERT_EQ(doc["data"].size(), 1u) << o.Name();
      for (const auto& [key, text] : doc["data"].items())
        EXPECT_EQ(text, ReadText(kDeploy / "monitoring" / key)) << o.Name();
    }
  }
  EXPECT_EQ(rendered["."], rendered["base"]);
  EXPECT_EQ(rendered["overlays/scheduler-extender"], rendered["base"]);
  std::set<std::string> second_only;
  for (const std::string& o : rendered["overlays/second-scheduler"])
    if (!rendered["base"].count(o)) second_only.insert(o);
  EXPECT_EQ(second_only,
            (std::set<std::string>{
                "Deployment mgpu-system/mgpu-scheduler", "ConfigMap mgpu-system/mgpu-scheduler-config",
                "ServiceAccount mgpu-system/mgpu-scheduler", "Role mgpu-system/mgpu-scheduler-lease",
                "RoleBinding mgpu-system/mgpu-scheduler-lease",
                "RoleBinding kube-system/mgpu-scheduler-authentication-reader",
                "ClusterRoleBinding /mgpu-scheduler-as-kube-scheduler",
                "ClusterRoleBinding /mgpu-scheduler-as-volume-scheduler"}));
  // deploy/dra/ is applied on top of a scheduler mode: its objects are its own.
  for (const std::string& o : rendered["dra"])
    EXPECT_FALSE(rendered["overlays/second-scheduler"].count(o)) << o;
  for (const Object& o : Objects()) {
    if (!Operational(o) || kComponentConfigs.count(o.Kind())) continue;
    const std::string key = o.Kind() + " " + o.Namespace() + "/" + o.Name();
    EXPECT_TRUE(rendered["overlays/second-scheduler"].count(key) || rendered["dra"].count(key))
        << o.file << ": " << o.Kind() << " " << o.Name() << " is in no kustomization";
  }
}

// The overlay for a GPU-less test node (what scripts/cluster.sh deploys) is the base with only the device
// plugin, the extender and the config changed, plus the static inventory: the plugin reads it through
// gpuBackend static from where the DaemonSet mounts it, both daemons are on the node's network and reach the
// API server on loopback, one extender replica.
TEST_F(Deploy, StaticTestNodeOverlayIsTheBaseWithStaticCardsOnTheNodesNetwork) {
  std::string why;
  const std::string kubectl = Kubectl(&why);
  if (kubectl.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(patch_files_, 2) << "overlays/static-test-node/patches/";
  EXPECT_GE(inventories_, 1) << "overlays/static-test-node/inventory.yaml";
  const std::vector<json> base = Render(kubectl, "base");
  const std::vector<json> overlay = Render(kubectl, "overlays/static-test-node");
  ASSERT_FALSE(overlay.empty());
  const std::set<std::string> changed = {"DaemonSet mgpu-device-plugin", "Deployment mgpu-scheduler-extender",
                                         "ConfigMap mgpu-config", "ConfigMap mgpu-static-inventory"};
  std::set<std::string> names;
  for (const json& o : overlay) {
    const std::string id = o.value("kind", "") + " " + o["metadata"].value("name", "");
    names.insert(id);
    if (changed.count(id)) continue;
    const json* same = RenderedObject(base, o.value("kind", ""), o["metadata"].value("name", ""));
    ASSERT_NE(same, nullptr) << id << " is not in the base";
    EXPECT_EQ(o, *same) << id << " differs from the base's";
  }
  EXPECT_EQ(names.size(), base.size() + 1) << "the base's objects and the static inventory";

  const json* config_map = RenderedObject(overlay, "ConfigMap", "mgpu-config");
  ASSERT_NE(config_map, nullptr);
  Result<Config> config =
      ParseConfig(config_map->at("data").at("config.yaml").get<std::string>(), "mgpu-config");
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->device_plugin.gpu_backend, "static");
  const json* inventory = RenderedObject(overlay, "ConfigMap", "mgpu-static-inventory");
  ASSERT_NE(inventory, nullptr);
  const fs::path file = config->device_plugin.static_inventory_file;
  ASSERT_TRUE(inventory->at("data").contains(file.filename().string())) << file;
  EXPECT_TRUE(
      node::StaticBackend::ParseCards(inventory->at("data").at(file.filename().string()).get<std::string>(),
                                      "mgpu-static-inventory")
          .ok());

  const json* plugin = RenderedObject(overlay, "DaemonSet", "mgpu-device-plugin");
  const json* extender = RenderedObject(overlay, "Deployment", "mgpu-scheduler-extender");
  ASSERT_TRUE(plugin && extender);
  EXPECT_EQ(extender->at("spec").value("replicas", 0), 1);
  for (const json* workload : {plugin, extender}) {
    const json& pod = workload->at("spec").at("template").at("spec");
    EXPECT_TRUE(pod.value("hostNetwork", false));
    EXPECT_EQ(pod.value("dnsPolicy", ""), "ClusterFirstWithHostNet");
    std::map<std::string, std::string> env;
    for (const json& e : pod["containers"][0].value("env", json::array()))
      env[e["name"]] = e.value("value", "");
    EXPECT_EQ(env["KUBERNETES_SERVICE_HOST"], "127.0.0.1");
    EXPECT_FALSE(env["KUBERNETES_SERVICE_PORT"].empty());
  }
  bool mounted = false;
  const json& pod = plugin->at("spec").at("template").at("spec");
  for (const json& m : pod["containers"][0]["volumeMounts"])
    for (const json& v : pod["volumes"])
      mounted |= v["name"] == m["name"] && v.contains("configMap") &&
                 v["configMap"]["name"] == "mgpu-static-inventory" &&
                 m["mountPath"] == file.parent_path().string();
  EXPECT_TRUE(mounted) << "the DaemonSet mounts mgpu-static-inventory at " << file.parent_path();
}

// The device plugin's liveness probe and the extender's probes call the pod's address at a port of the
// container: in the base and every overlay, each daemon listens on that port, on every address (or, with
// hostNetwork, possibly the node's); otherwise the probe fails and the kubelet restarts the daemon for ever.
TEST_F(Deploy, ProbesReachTheAddressesTheDaemonsListenOn) {
  std::string why;
  const std::string kubectl = Kubectl(&why);
  if (kubectl.empty()) GTEST_SKIP() << why;
  for (const std::string root : {"base", "overlays/second-scheduler", "overlays/static-test-node"}) {
    SCOPED_TRACE(root);
    const std::vector<json> docs = Render(kubectl, root);
    const json* config_map = RenderedObject(docs, "ConfigMap", "mgpu-config");
    ASSERT_NE(config_map, nullptr);
    Result<Config> config =
        ParseConfig(config_map->at("data").at("config.yaml").get<std::string>(), "mgpu-config");
    ASSERT_TRUE(config.ok()) << config.message();
    const std::pair<const char*, const char*> daemons[] = {{"DaemonSet", "mgpu-device-plugin"},
                                                           {"Deployment", "mgpu-scheduler-extender"}};
    for (const auto& [kind, name] : daemons) {
      const json* workload = RenderedObject(docs, kind, name);
      ASSERT_NE(workload, nullptr) << name;
      const json& pod = workload->at("spec").at("template").at("spec");
      const json& container = pod["containers"][0];
      const std::string address = std::string(name) == "mgpu-device-plugin"
                                      ? config->device_plugin.metrics_address
                                      : config->extender.listen_address;
      Result<HostPort> listen = ParseHostPort(address, name);
      ASSERT_TRUE(listen.ok()) << listen.message();
      EXPECT_TRUE(listen->host == "0.0.0.0" || pod.value("hostNetwork", false))
          << name << " listens on " << address << " only, which the probe (the pod's address) does not reach";
      for (const char* probe : {"livenessProbe", "readinessProbe"}) {
        if (!container.contains(probe)) continue;
        const json& port = container[probe]["httpGet"]["port"];
        int number = port.is_number() ? port.get<int>() : 0;
        for (const json& p : container.value("ports", json::array()))
          if (port.is_string() && p.value("name", "") == port.get<std::string>()) number = p["containerPort"];
        EXPECT_EQ(number, listen->port)
            << name << " " << probe << " calls port " << port << " but it listens on " << address;
      }
    }
  }
}

// The webhook is safe for the cluster and reaches the extender's /validate through its Service.
TEST_F(Deploy, AdmissionWebhookIsSafeAndReachesTheExtender) {
  std::vector<json> configs;
  for (const Object& o : Objects())
    if (o.Kind() == "ValidatingWebhookConfiguration" && o.file.rfind("dra/", 0) != 0)
      configs.push_back(o.doc);
  ASSERT_EQ(configs.size(), 1u);
  const std::string ns = MgpuNamespace();
  std::set<std::string> resources;
  for (const json& w : configs[0]["webhooks"]) {
    const std::string name = w.value("name", "");
    SCOPED_TRACE(name);
    EXPECT_EQ(w.value("failurePolicy", ""), "Ignore") << "a down extender must never block the cluster";
    EXPECT_EQ(w.value("sideEffects", ""), "None");
    EXPECT_EQ(w.value("admissionReviewVersions", json()), json::array({"v1"}));
    EXPECT_LE(w.value("timeoutSeconds", 10), 10);
    const json& service = w["clientConfig"]["service"];
    EXPECT_EQ(service.value("path", ""), "/validate");
    const Object* target = Find("Service", service.value("namespace", ""), service.value("name", ""));
    ASSERT_TRUE(target) << "the webhook calls a missing Service";
    bool port_found = false;
    for (const json& p : target->doc["spec"]["ports"])
      port_found |= p.value("port", 0) == service.value("port", 443);
    EXPECT_TRUE(port_found) << "the Service has no port " << service.value("port", 443);
    // Only objects asking for an mgpu resource are sent, never mgpu's own namespace nor kube-system.
    ASSERT_TRUE(w["matchConditions"].is_array());
    for (const json& c : w["matchConditions"])
      for (const std::string& domain : {Config().resource_domain, std::string("vke.volcengine.com")})
        EXPECT_NE(c.value("expression", "").find("'" + domain + "/'"), std::string::npos) << domain;
    const std::string selector = w["namespaceSelector"].dump();
    for (const std::string& kept_out : {ns, std::string("kube-system")})
      EXPECT_NE(selector.find("\"" + kept_out + "\""), std::string::npos) << selector;
    for (const json& rule : w["rules"]) {
      for (const json& r : rule["resources"]) {
        resources.insert(r.get<std::string>());
        if (r == "pods") {
          EXPECT_EQ(rule["operations"], json::array({"CREATE"})) << "a live pod stays editable";
        }
      }
    }
  }
  EXPECT_EQ(resources, (std::set<std::string>{"pods", "deployments", "statefulsets", "replicasets",
                                              "daemonsets", "jobs", "cronjobs"}));
}

// The mutating webhook rewrites every pod asking for mgpu-memory (MiB as written) before it is stored: it
// fails closed (a pod not rewritten would hold memoryUnitMiB times what it asked), is sent only pods asking
// for mgpu-memory under either domain, at CREATE, and keeps kube-system out.
TEST_F(Deploy, MemoryWebhookRewritesEveryGpuPodAndBlocksNothingElse) {
  const Object* config = Find("MutatingWebhookConfiguration", "", "mgpu-scheduler-extender");
  ASSERT_TRUE(config);
  ASSERT_EQ(config->doc["webhooks"].size(), 1u);
  const json& w = config->doc["webhooks"][0];
  EXPECT_EQ(w["failurePolicy"], "Fail");
  EXPECT_EQ(w["sideEffects"], "None");
  EXPECT_EQ(w["reinvocationPolicy"], "Never");
  EXPECT_LE(w.value("timeoutSeconds", 10), 10);
  const json& service = w["clientConfig"]["service"];
  EXPECT_EQ(service["path"], "/mutate-memory");
  EXPECT_TRUE(Find("Service", service.value("namespace", ""), service.value("name", "")));
  EXPECT_EQ(w["rules"], json::parse(R"([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                         "resources": ["pods"], "scope": "Namespaced"}])"));
  EXPECT_FALSE(w.contains("objectSelector")) << "the validation's opt-out must not turn the rewrite off";
  EXPECT_NE(w["namespaceSelector"].dump().find("\"kube-system\""), std::string::npos);
  ASSERT_EQ(w["matchConditions"].size(), 1u);
  const std::string expression = w["matchConditions"][0]["expression"];
  for (const std::string& domain : {Config().resource_domain, std::string("vke.volcengine.com")})
    EXPECT_NE(expression.find("'" + domain + "/mgpu-memory'"), std::string::npos) << domain;
  EXPECT_EQ(expression.find("mgpu-core"), std::string::npos) << "only mgpu-memory needs the rewrite";
}

// deploy/dra/ (docs/dra.md §7): the node daemon runs in DRA mode with a config that says so, on DRA nodes
// only (the device plugin stays off them), with the kubelet's plugin folders and the CDI folder its config
// names; the DeviceClasses are the ones common/dra.h names; the webhooks reach the extender's /mutate and
// /validate-claims, the pod mutation only in namespaces that opt in, creating nothing on a dry run.
TEST_F(Deploy, DraModeRunsTheNodeDaemonAsADriverAndReachesTheExtendersWebhooks) {
  const Object* daemonset = Find("DaemonSet", MgpuNamespace(), "mgpu-dra-driver");
  ASSERT_TRUE(daemonset);
  const json& pod = daemonset->doc["spec"]["template"]["spec"];
  const json& container = pod["containers"][0];
  const json& args = container["args"];
  ASSERT_EQ(args.size(), 8u);
  EXPECT_EQ(args[2], "--mode");
  EXPECT_EQ(args[3], "dra");
  EXPECT_NE(pod["affinity"].dump().find("\"mgpu.io/dra\""), std::string::npos);
  // The rolling update of docs/dra.md §1: the new pod beside the old, each on sockets of its pod UID, Ready
  // (so the old one stopped) once the kubelet registered it, which the ready file on a volume of its own
  // says.
  const json& update = daemonset->doc["spec"]["updateStrategy"];
  EXPECT_EQ(update["type"], "RollingUpdate");
  EXPECT_EQ(update["rollingUpdate"]["maxSurge"], 1);
  EXPECT_EQ(update["rollingUpdate"]["maxUnavailable"], 0);
  EXPECT_EQ(args[4], "--instance-id");
  EXPECT_EQ(args[5], "$(POD_UID)");
  bool uid = false;
  for (const json& e : container["env"])
    uid |= e["name"] == "POD_UID" && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid";
  EXPECT_TRUE(uid) << "POD_UID comes from the downward API's metadata.uid";
  EXPECT_EQ(args[6], "--ready-file");
  const std::string ready = args[7];
  EXPECT_EQ(container["readinessProbe"]["exec"]["command"], json::array({"test", "-e", ready}));
  bool own_volume = false;
  for (const json& m : container["volumeMounts"])
    for (const json& v : pod["volumes"])
      own_volume |= v["name"] == m["name"] && v.contains("emptyDir") &&
                    ready.rfind(m["mountPath"].get<std::string>() + "/", 0) == 0;
  EXPECT_TRUE(own_volume)
      << "the ready file is on a volume of the pod's own (the root filesystem is read-only)";
  const Object* plugin = Find("DaemonSet", MgpuNamespace(), "mgpu-device-plugin");
  ASSERT_TRUE(plugin);
  EXPECT_NE(plugin->doc["spec"]["template"]["spec"]["affinity"].dump().find("\"NotIn\""), std::string::npos)
      << "the device plugin must stay off DRA nodes";
  // The cluster's one config, in DRA mode by the flag; the dra.* keys' defaults are the paths mounted.
  EXPECT_NE(pod["volumes"].dump().find("\"mgpu-config\""), std::string::npos);
  const Config defaults;
  std::set<std::string> mounted;
  for (const json& m : pod["containers"][0]["volumeMounts"]) mounted.insert(m["mountPath"]);
  for (const std::string& path :
       {defaults.dra.kubelet_root_dir + "/plugins", defaults.dra.kubelet_root_dir + "/plugins_registry",
        defaults.dra.cdi_directory,
        defaults.dra.state_directory.substr(0, defaults.dra.state_directory.rfind('/'))})
    EXPECT_TRUE(mounted.count(path)) << path;
  std::set<std::string> classes;
  for (const Object& o : Objects())
    if (o.Kind() == "DeviceClass") classes.insert(o.Name());
  EXPECT_EQ(classes,
            (std::set<std::string>{"mgpu.io", "fixed-share.mgpu.io", "guaranteed-burst-share.mgpu.io",
                                   "native-burst-share.mgpu.io", "whole.mgpu.io"}));
  EXPECT_EQ(Find("DeviceClass", "", "whole.mgpu.io")->doc["spec"]["extendedResourceName"], "mgpu.io/gpu");

  const Object* mutating = Find("MutatingWebhookConfiguration", "", "mgpu-scheduler-extender-dra");
  const Object* claims = Find("ValidatingWebhookConfiguration", "", "mgpu-scheduler-extender-dra");
  ASSERT_TRUE(mutating && claims);
  ASSERT_EQ(mutating->doc["webhooks"].size(), 2u);
  for (const auto& [doc, paths] :
       {std::pair{&mutating->doc, std::vector<std::string>{"/mutate", "/mutate-claims"}},
        {&claims->doc, std::vector<std::string>{"/validate-claims"}}}) {
    size_t k = 0;
    for (const json& w : (*doc)["webhooks"]) {
      EXPECT_EQ(w["clientConfig"]["service"]["path"], paths[k++]);
      EXPECT_EQ(w["clientConfig"]["service"]["name"], "mgpu-scheduler-extender");
      EXPECT_LE(w.value("timeoutSeconds", 10), 10);
      EXPECT_TRUE(Find("Service", w["clientConfig"]["service"]["namespace"], "mgpu-scheduler-extender"));
    }
  }
  const json& mutate = mutating->doc["webhooks"][0];
  EXPECT_EQ(mutate["sideEffects"], "NoneOnDryRun");
  EXPECT_EQ(mutate["namespaceSelector"]["matchLabels"], json({{"mgpu.io/dra", "enabled"}}));
  EXPECT_EQ(claims->doc["webhooks"][0]["failurePolicy"], "Ignore");
  // Hand-written claims' pods in every namespace; without the extender they are placed all the same.
  EXPECT_EQ(mutating->doc["webhooks"][1]["failurePolicy"], "Ignore");
  EXPECT_EQ(mutating->doc["webhooks"][1]["sideEffects"], "None");
  // The extender may create the templates it names and read the claims and templates it counts, nothing more.
  const Object* role = Find("ClusterRole", "", "mgpu-scheduler-extender-dra");
  ASSERT_TRUE(role);
  EXPECT_EQ(role->doc["rules"],
            json::parse(R"([{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"],
                             "verbs": ["create", "get"]},
                            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
                             "verbs": ["get", "list", "watch"]}])"));
}

// scripts/certs.sh makes a CA and a serving certificate valid for the Service name the webhook and the
// scheduler call, a Secret that carries them, and the caBundle; the extender serves with them.
TEST_F(Deploy, CertsScriptMakesWhatTheExtenderServesAndItsCallersTrust) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/certs";
  ASSERT_EQ(std::system((kCertsScript.string() + " --out " + out + " > " + dir.path() + "/log 2>&1").c_str()),
            0)
      << ReadText(dir.path() + "/log");
  const std::string host = "mgpu-scheduler-extender." + MgpuNamespace() + ".svc";
  EXPECT_EQ(std::system(("openssl verify -CAfile " + out + "/ca.crt -verify_hostname " + host + " " + out +
                         "/tls.crt > /dev/null")
                            .c_str()),
            0);
  Result<std::vector<json>> secret = YamlDocumentsToJson(ReadText(out + "/secret.yaml"));
  ASSERT_TRUE(secret.ok()) << secret.message();
  ASSERT_EQ(secret->size(), 1u);
  const json& s = secret->front();
  EXPECT_EQ(s["kind"], "Secret");
  EXPECT_EQ(s["type"], "kubernetes.io/tls");
  EXPECT_EQ(s["metadata"]["namespace"], MgpuNamespace());
  EXPECT_TRUE(MountsSecretAt("mgpu-scheduler-extender", "/etc/mgpu-tls"));
  for (const char* key : {"tls.crt", "tls.key", "ca.crt"}) EXPECT_TRUE(s["data"].contains(key)) << key;
  EXPECT_EQ(s["data"]["ca.crt"], ReadText(out + "/caBundle"));
  EXPECT_NE(ReadText(dir.path() + "/log").find(ReadText(out + "/caBundle")), std::string::npos) << "printed";

  // --apply, with a kubectl that records what it is asked and knows a configuration of three webhooks.
  const std::string calls = dir.path() + "/kubectl-calls";
  fs::create_directories(dir.path() + "/bin");
  const std::string stub = dir.Write(
      "bin/kubectl", "#!/bin/sh\necho \"$*\" >> " + calls + "\ncase \"$1\" in get) printf xxx ;; esac\n");
  ASSERT_EQ(std::system(("chmod +x " + stub).c_str()), 0);
  ASSERT_EQ(std::system(("PATH=" + dir.path() + "/bin:$PATH " + kCertsScript.string() + " --out " +
                         dir.path() + "/applied --apply > " + dir.path() + "/log 2>&1")
                            .c_str()),
            0)
      << ReadText(dir.path() + "/log");
  const std::string bundle = ReadText(dir.path() + "/applied/caBundle");
  std::istringstream lines(ReadText(calls));
  std::vector<std::string> call;
  for (std::string line; std::getline(lines, line);) call.push_back(line);
  // The stub knows all four configurations (deploy/'s and deploy/dra/'s), each of three webhooks.
  ASSERT_EQ(call.size(), 9u) << ReadText(calls);
  EXPECT_EQ(call[0], "apply -f " + dir.path() + "/applied/secret.yaml");
  const std::vector<std::string> configurations = {
      "validatingwebhookconfiguration mgpu-scheduler-extender ",
      "mutatingwebhookconfiguration mgpu-scheduler-extender ",
      "validatingwebhookconfiguration mgpu-scheduler-extender-dra ",
      "mutatingwebhookconfiguration mgpu-scheduler-extender-dra "};
  for (size_t k = 0; k < configurations.size(); ++k) {
    EXPECT_EQ(call[1 + 2 * k].rfind("get " + configurations[k], 0), 0u) << call[1 + 2 * k];
    const std::string& patched = call[2 + 2 * k];
    EXPECT_EQ(patched.rfind("patch " + configurations[k] + "--type=json -p ", 0), 0u) << patched;
    const json patch = json::parse(patched.substr(patched.find('[')), nullptr, false);
    ASSERT_TRUE(patch.is_array()) << patched;
    ASSERT_EQ(patch.size(), 3u);
    for (size_t i = 0; i < patch.size(); ++i) {
      EXPECT_EQ(patch[i]["path"], "/webhooks/" + std::to_string(i) + "/clientConfig/caBundle");
      EXPECT_EQ(patch[i]["value"], bundle);
    }
  }

  testing::FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  Config config;
  config.extender.listen_address = "127.0.0.1:0";
  config.extender.tls_cert_file = out + "/tls.crt";
  config.extender.tls_key_file = out + "/tls.key";
  extender::Daemon daemon(config);
  kube::ClusterConfig cluster;
  cluster.server = api.url();
  ASSERT_TRUE(daemon.Start(cluster).ok());
  httplib::SSLClient http("127.0.0.1", daemon.port());
  http.enable_server_certificate_verification(
      false);  // the name is the Service's, not 127.0.0.1 (checked above)
  auto res = http.Post("/validate", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  daemon.Stop();
}

}  // namespace
}  // namespace mgpu
