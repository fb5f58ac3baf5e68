// mgpu with the real Prometheus tools (Debian package prometheus): both daemons' /metrics, taken from the
// demo cluster after its workloads settle, pass `promtool check metrics`; deploy/monitoring/ passes `promtool
// check config` and the rule unit tests (rules_test.yml); and a real Prometheus on loopback scrapes the
// demo's daemons and answers, through its HTTP API, the per-card allocation, the per-pod share and the
// recording rules. Skipped, with a sentence, where the tools are not installed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "common/file.h"
#include "common/manifest.h"
#include "common/yaml_json.h"
#include "testing/local_cluster.h"
#include "testing/test_env.h"

namespace mgpu::testing {
namespace {

using nlohmann::json;

const std::string kSource = MGPU_SOURCE_DIR;
const std::string kExamples = kSource + "/deploy/examples/";
const std::string kMonitoring = kSource + "/deploy/monitoring/";
constexpr char kMissing[] = " is not installed (Debian package prometheus, which scripts/setup.sh installs)";

std::string ReadText(const std::string& path) {
  Result<std::string> text = mgpu::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.message();
  return text.ok() ? *text : "";
}

bool Installed(const std::string& tool) {
  return std::system(("command -v " + tool + " > /dev/null 2>&1").c_str()) == 0;
}

struct Ran {
  int status;
  std::string output;
};

// Runs `command` with the shell in `dir`, stdout and stderr together.
Ran Shell(const std::string& command, const TempDir& dir) {
  const std::string log = dir.path() + "/shell.log";
  const int status = std::system(("(" + command + ") > " + log + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadText(log)};
}

// The demo cluster (deploy/examples/) with its workloads scheduled and admitted.
class Monitoring : public ::testing::Test {
 protected:
  void StartDemo() {
    Result<Config> config = LoadConfigFile(kExamples + "demo-config.yaml");
    ASSERT_TRUE(config.ok()) << config.message();
    Result<std::vector<SampleNode>> samples = SampleNodesOf(ReadText(kExamples + "nodes.yaml"));
    ASSERT_TRUE(samples.ok()) << samples.message();
    LocalClusterOptions options;
    options.config = *config;
    for (const SampleNode& s : *samples) options.nodes.push_back({s.name, s.inventory.cards});
    options.work_dir = dir_.path();
    cluster_ = std::make_unique<LocalCluster>(std::move(options));
    const Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started.message();
    Result<std::vector<std::string>> pods = cluster_->Submit(ReadText(kExamples + "workloads.yaml"));
    ASSERT_TRUE(pods.ok()) << pods.message();
    cluster_->SchedulePending();
    ASSERT_TRUE(cluster_->WaitSettled());
  }

  // "host:port" of every daemon's /metrics: the extender first, then each node's plugin.
  std::vector<std::string> Targets() const {
    std::vector<std::string> targets = {cluster_->extender_url().substr(std::string("http://").size())};
    for (const auto& [node, address] : cluster_->plugin_metrics_addresses()) targets.push_back(address);
    return targets;
  }

  // Every daemon's /metrics text.
  std::vector<std::string> MetricsTexts() {
    std::vector<std::string> texts;
    for (const std::string& target : Targets()) {
      httplib::Client http("http://" + target);
      httplib::Result res = http.Get("/metrics");
      EXPECT_TRUE(res && res->status == 200) << target;
      texts.push_back(res ? res->body : "");
    }
    return texts;
  }

  TempDir dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

// The metric names a PromQL expression reads: what is left once quoted strings, label matchers, ranges,
// grouping label lists, function calls and operators are taken out.
std::set<std::string> MetricNames(std::string expr) {
  for (const char* drop : {R"("(?:[^"\\]|\\.)*")", R"(\{[^}]*\})", R"(\[[^\]]*\])",
                           R"(\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))"})
    expr = std::regex_replace(expr, std::regex(drop), " ");
  static const std::set<std::string> kOperators = {"and", "or", "unless", "bool", "offset"};
  std::set<std::string> names;
  const std::regex identifier(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\(?))");
  for (std::sregex_iterator it(expr.begin(), expr.end(), identifier), end; it != end; ++it) {
    if ((*it)[2].length() > 0 || kOperators.count((*it)[1])) continue;  // a function, or an operator
    const auto at = it->position(0);
    if (at > 0 && (std::isdigit(static_cast<unsigned char>(expr[at - 1])) || expr[at - 1] == '.')) continue;
    names.insert((*it)[1]);
  }
  return names;
}

TEST(MetricNamesTest, KeepsOnlyTheSeriesNames) {
  EXPECT_EQ(MetricNames(R"(histogram_quantile(0.99, sum by (verb, le) (rate(a_bucket{x="y}"}[5m]))))"),
            (std::set<std::string>{"a_bucket"}));
  EXPECT_EQ(MetricNames("count(m:r == 0) or vector(0) and on(instance) (b == 1e3)"),
            (std::set<std::string>{"m:r", "b"}));
}

TEST_F(Monitoring, PromtoolAcceptsBothDaemonsMetrics) {
  if (!Installed("promtool")) GTEST_SKIP() << "promtool" << kMissing;
  StartDemo();
  const std::vector<std::string> targets = Targets();
  ASSERT_EQ(targets.size(), 3u) << "the extender and two nodes' plugins";
  for (const std::string& target : targets) {
    SCOPED_TRACE(target);
    httplib::Client http("http://" + target);
    httplib::Result res = http.Get("/metrics");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("_core_allocated_percent{node=\"node-"), std::string::npos) << "per-card series";
    EXPECT_TRUE(
        res->body.find("\nmgpu_extender_ready 1\n") != std::string::npos ||
        std::regex_search(res->body, std::regex("\nmgpu_plugin_registered\\{node=\"node-[a-z0-9]+\"\\} 1\n")))
        << "what the alerts read";
    const std::string file = dir_.Write("metrics.txt", res->body);
    const Ran check = Shell("promtool check metrics < " + file, dir_);
    EXPECT_EQ(check.status, 0) << check.output;
    EXPECT_EQ(check.output, "") << "promtool's lint found problems";
  }
}

// The scrape configuration and the rules are valid, the rules do what rules_test.yml says, and the scrape
// configuration reaches the daemons where deploy/ runs them.
TEST_F(Monitoring, PromtoolAcceptsTheScrapeConfigurationAndTheRules) {
  if (!Installed("promtool")) GTEST_SKIP() << "promtool" << kMissing;
  const Ran config = Shell("promtool check config " + kMonitoring + "prometheus.yml", dir_);
  EXPECT_EQ(config.status, 0) << config.output;
  EXPECT_NE(config.output.find("SUCCESS: 1 rule files found"), std::string::npos) << config.output;
  const Ran rules = Shell("cd " + kSource + "/tests/monitoring && promtool test rules rules_test.yml", dir_);
  EXPECT_EQ(rules.status, 0) << rules.output;

  Result<std::vector<json>> scrape = YamlDocumentsToJson(ReadText(kMonitoring + "prometheus.yml"));
  ASSERT_TRUE(scrape.ok()) << scrape.message();
  Result<std::vector<json>> services = YamlDocumentsToJson(ReadText(kMonitoring + "services.yaml"));
  ASSERT_TRUE(services.ok()) << services.message();
  Result<std::vector<json>> deploy_config = YamlDocumentsToJson(ReadText(kSource + "/deploy/base/config.yaml"));
  ASSERT_TRUE(deploy_config.ok());
  Result<Config> mgpu =
      ParseConfig(deploy_config->front()["data"]["config.yaml"].get<std::string>(), "config");
  ASSERT_TRUE(mgpu.ok()) << mgpu.message();
  const auto port_of = [](const std::string& address) {
    return std::stoi(address.substr(address.rfind(':') + 1));
  };
  const std::map<std::string, int> daemon_port = {
      {"mgpu-scheduler-extender", port_of(mgpu->extender.listen_address)},
      {"mgpu-device-plugin", port_of(mgpu->device_plugin.metrics_address)}};
  std::set<std::string> jobs;
  for (const json& job : scrape->front()["scrape_configs"]) {
    const std::string name = job.value("job_name", "");
    jobs.insert(name);
    SCOPED_TRACE(name);
    ASSERT_TRUE(daemon_port.count(name));
    EXPECT_EQ(job.value("scheme", "http") == "https",
              !mgpu->extender.tls_cert_file.empty() && name == "mgpu-scheduler-extender");
    for (const json& sd : job["dns_sd_configs"]) {
      EXPECT_EQ(sd.value("port", 0), daemon_port.at(name));
      for (const json& dns : sd["names"]) {
        bool found = false;
        for (const json& s : *services) {
          const std::string fqdn = s["metadata"].value("name", "") + "." +
                                   s["metadata"].value("namespace", "") + ".svc.cluster.local";
          if (fqdn != dns) continue;
          found = true;
          EXPECT_EQ(s["spec"]["clusterIP"], "None") << "DNS discovery needs a headless Service";
          EXPECT_EQ(s["spec"]["selector"]["app.kubernetes.io/name"], name);
        }
        EXPECT_TRUE(found) << dns << " is no headless Service of deploy/monitoring/services.yaml";
      }
    }
  }
  EXPECT_EQ(jobs.size(), 2u);
}

// Every query of the Grafana dashboard names series the daemons export (histograms by their _bucket, _sum and
// _count) or the rules record, and the rules read exported series only.
TEST_F(Monitoring, DashboardAndRulesQueryOnlyWhatTheDaemonsExport) {
  StartDemo();
  std::set<std::string> exported;
  const std::regex type_line(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+))");
  for (const std::string& text : MetricsTexts()) {
    for (std::sregex_iterator it(text.begin(), text.end(), type_line), end; it != end; ++it) {
      exported.insert((*it)[1]);
      if ((*it)[2] == "histogram")
        for (const char* suffix : {"_bucket", "_sum", "_count"}) exported.insert((*it)[1].str() + suffix);
    }
  }
  ASSERT_GT(exported.size(), 20u);

  Result<std::vector<json>> rules = YamlDocumentsToJson(ReadText(kMonitoring + "mgpu-rules.yml"));
  ASSERT_TRUE(rules.ok()) << rules.message();
  std::set<std::string> known = exported;
  for (const json& group : rules->front()["groups"])
    for (const json& rule : group["rules"])
      if (rule.contains("record")) known.insert(rule["record"].get<std::string>());
  for (const json& group : rules->front()["groups"]) {
    for (const json& rule : group["rules"]) {
      const std::set<std::string> names = MetricNames(rule.value("expr", ""));
      EXPECT_FALSE(names.empty()) << rule.dump();
      for (const std::string& name : names)
        EXPECT_TRUE(exported.count(name)) << rule.value("record", rule.value("alert", "")) << " reads "
                                          << name << ", which no daemon exports";
    }
  }

  const json dashboard = json::parse(ReadText(kMonitoring + "mgpu-dashboard.json"), nullptr, false);
  ASSERT_TRUE(dashboard.is_object()) << "mgpu-dashboard.json is not JSON";
  std::vector<std::string> queries;
  for (const json& variable : dashboard["templating"]["list"]) {
    std::smatch series;  // Grafana's label_values(series, label): the label is no series
    const std::string definition = variable.value("definition", "");
    if (std::regex_match(definition, series, std::regex(R"(label_values\((.+),\s*\w+\))")))
      queries.push_back(series[1]);
    else if (variable.value("type", "") == "query")
      queries.push_back(definition);
  }
  std::set<int> ids;
  for (const json& panel : dashboard["panels"]) {
    EXPECT_TRUE(ids.insert(panel.value("id", 0)).second) << "panel id " << panel.value("id", 0) << " twice";
    if (panel.value("type", "") == "row") continue;
    EXPECT_FALSE(panel.value("targets", json::array()).empty()) << panel.value("title", "");
    for (const json& target : panel.value("targets", json::array()))
      queries.push_back(target.value("expr", ""));
  }
  ASSERT_GE(queries.size(), 20u);
  for (const std::string& query : queries) {
    const std::set<std::string> names = MetricNames(query);
    EXPECT_FALSE(names.empty()) << query;
    for (const std::string& name : names)
      EXPECT_TRUE(known.count(name)) << query << " reads " << name
                                     << ", which no daemon exports nor rule records";
  }
}

// A real Prometheus on loopback, scraping the demo's three daemons every second with deploy/'s rules.
TEST_F(Monitoring, RealPrometheusScrapesTheDemo) {
  if (!Installed("prometheus")) GTEST_SKIP() << "prometheus" << kMissing;
  StartDemo();
  json targets = json::array();
  for (const std::string& t : Targets()) targets.push_back(t);
  const json config = {
      {"global", {{"scrape_interval", "1s"}, {"evaluation_interval", "1s"}}},
      {"rule_files", {kMonitoring + "mgpu-rules.yml"}},
      {"scrape_configs", {{{"job_name", "mgpu"}, {"static_configs", {{{"targets", targets}}}}}}}};
  const std::string config_file = dir_.Write("prometheus.yml", config.dump());  // JSON is YAML
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string log = dir_.path() + "/prometheus.log";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    const std::string config_flag = "--config.file=" + config_file;
    const std::string storage_flag = "--storage.tsdb.path=" + dir_.path() + "/tsdb";
    const std::string listen_flag = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    execlp("prometheus", "prometheus", config_flag.c_str(), storage_flag.c_str(), listen_flag.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Stop {
    pid_t pid;
    ~Stop() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } stop{pid};

  httplib::Client prometheus("127.0.0.1", port);
  // The value of the one series `query` answers, or "" until there is one.
  const auto value = [&](const std::string& query) -> std::string {
    httplib::Result res = prometheus.Get("/api/v1/query", {{"query", query}}, httplib::Headers{});
    if (!res || res->status != 200) return "";
    const json body = json::parse(res->body, nullptr, false);
    const json result = body.is_object() ? body["data"].value("result", json::array()) : json::array();
    return result.size() == 1 ? result[0]["value"][1].get<std::string>() : "";
  };
  // The demo's infer-online pods take 30 + 30 percent of node-a10's card 0 (deploy/examples/workloads.yaml),
  // as the plugin (the kubelet's allocation) and the extender (its cache) both see once scraped.
  const std::string card =
      R"({__name__=~"mgpu_(extender_)?card_core_allocated_percent",node="node-a10",card="0"})";
  const std::string share = R"(mgpu_pod_gpu_share{namespace="default",pod="infer-online-0"})";
  const std::string extender_share =
      R"(mgpu_extender_pod_gpu_share{namespace="default",pod="infer-online-0"})";
  const auto scraped = [&] {
    return value("min(" + card + ")") == "60" && value("max(" + card + ")") == "60" &&
           value("count(" + card + ")") == "2" && !value(share).empty() && !value(extender_share).empty();
  };
  EXPECT_TRUE(WaitUntil(scraped, std::chrono::seconds(60))) << "Prometheus's log:\n" << ReadText(log);
  EXPECT_EQ(value(share), "0.3");
  EXPECT_EQ(value(share), value(extender_share)) << "the plugin and the extender bill the pod alike";
  EXPECT_TRUE(WaitUntil([&] { return !value("mgpu:cluster_core_allocated:ratio").empty(); },
                        std::chrono::seconds(30)))
      << "the recording rules evaluate on the daemons' series";
  EXPECT_EQ(value("mgpu:cluster_core_allocated:ratio"), value("mgpu_extender_cluster_core_allocated_ratio"));
}

}  // namespace
}  // namespace mgpu::testing
