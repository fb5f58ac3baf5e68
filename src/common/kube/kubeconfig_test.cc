#include "common/kube/kubeconfig.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "testing/test_env.h"

namespace mgpu::kube {
namespace {

using mgpu::testing::TempDir;

const char kTwoContexts[] = R"(apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority: ca.crt
- name: remote
  cluster:
    server: https://10.0.0.1:443
    certificate-authority-data: aGVsbG8K
    insecure-skip-tls-verify: true
users:
- name: token-user
  user:
    token: abc123
- name: cert-user
  user:
    client-certificate: certs/client.crt
    client-key-data: d29ybGQK
contexts:
- name: ctx-local
  context: {cluster: local, user: token-user, namespace: team-a}
- name: ctx-remote
  context: {cluster: remote, user: cert-user}
current-context: ctx-local
)";

// Sets an environment variable for the scope of a test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(KubeconfigTest, CurrentContextWithToken) {
  auto config = ParseKubeconfig(kTwoContexts, "/etc/kube");
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->context, "ctx-local");
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_file, "/etc/kube/ca.crt");
  EXPECT_EQ(config->ca_data, "");
  EXPECT_EQ(config->token, "abc123");
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, NamedContextWithCertificateData) {
  auto config = ParseKubeconfig(kTwoContexts, "/etc/kube", "ctx-remote");
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->server, "https://10.0.0.1:443");
  EXPECT_EQ(config->ca_data, "hello\n");
  EXPECT_EQ(config->ca_file, "");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->client_cert_file, "/etc/kube/certs/client.crt");
  EXPECT_EQ(config->client_key_data, "world\n");
  EXPECT_EQ(config->token, "");
  EXPECT_EQ(config->default_namespace, "default");
}

TEST(KubeconfigTest, RejectsBrokenConfigs) {
  EXPECT_FALSE(ParseKubeconfig(kTwoContexts, "", "no-such-context").ok());
  EXPECT_FALSE(ParseKubeconfig("clusters: [", "").ok());
  EXPECT_FALSE(ParseKubeconfig("", "").ok());  // no current context
  EXPECT_FALSE(
      ParseKubeconfig("current-context: a\ncontexts:\n- name: a\n  context: {cluster: missing}\n", "").ok());
  auto no_key = ParseKubeconfig(R"(
clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {client-certificate-data: aGVsbG8K}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
current-context: a)",
                                "");
  EXPECT_FALSE(no_key.ok());
  auto exec = ParseKubeconfig(R"(
clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
current-context: a)",
                              "");
  ASSERT_FALSE(exec.ok());
  EXPECT_NE(exec.message().find("exec"), std::string::npos);
  auto bad_data = ParseKubeconfig(R"(
clusters: [{name: c, cluster: {server: "https://h", certificate-authority-data: "!!!"}}]
contexts: [{name: a, context: {cluster: c}}]
current-context: a)",
                                  "");
  EXPECT_FALSE(bad_data.ok());
}

TEST(KubeconfigTest, ExecCredentialPlugin) {
  const std::string head = R"(
clusters: [{name: c, cluster: {server: "https://h"}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
current-context: a
users:
- name: u
  user:
    exec:
)";
  auto config = ParseKubeconfig(head + R"(      apiVersion: client.authentication.k8s.io/v1
      command: bin/get-token
      args: [--cluster, prod]
      env: [{name: REGION, value: eu-1}, {name: EMPTY}]
      interactiveMode: Never
)",
                                "/etc/kube");
  ASSERT_TRUE(config.ok()) << config.message();
  ASSERT_TRUE(config->exec.has_value());
  EXPECT_EQ(config->exec->api_version, "client.authentication.k8s.io/v1");
  EXPECT_EQ(config->exec->command, "/etc/kube/bin/get-token");  // has a '/': next to the kubeconfig
  EXPECT_EQ(config->exec->args, (std::vector<std::string>{"--cluster", "prod"}));
  EXPECT_EQ(config->exec->env,
            (std::vector<std::pair<std::string, std::string>>{{"REGION", "eu-1"}, {"EMPTY", ""}}));
  auto on_path = ParseKubeconfig(
      head + "      {apiVersion: client.authentication.k8s.io/v1beta1, command: aws}\n", "/etc/kube");
  ASSERT_TRUE(on_path.ok()) << on_path.message();
  EXPECT_EQ(on_path->exec->command, "aws");  // looked up on PATH
  for (const std::string bad :
       {"      {command: aws}\n", "      {apiVersion: client.authentication.k8s.io/v2, command: aws}\n",
        "      {apiVersion: client.authentication.k8s.io/v1}\n",
        "      {apiVersion: client.authentication.k8s.io/v1, command: aws, args: x}\n",
        "      {apiVersion: client.authentication.k8s.io/v1, command: aws, env: [{value: v}]}\n"}) {
    auto r = ParseKubeconfig(head + bad, "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("exec"), std::string::npos) << r.message();
  }
}

TEST(KubeconfigTest, MergesFilesFirstDefinitionWins) {
  TempDir dir;
  std::string first = dir.Write("first", R"(
clusters: [{name: c, cluster: {server: "https://first"}}]
users: [{name: u, user: {token: first-token}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
)");
  std::string second = dir.Write("second", R"(
clusters: [{name: c, cluster: {server: "https://second"}}, {name: d, cluster: {server: "https://d"}}]
users: [{name: u, user: {token: second-token}}]
contexts: [{name: a, context: {cluster: d, user: u}}, {name: b, context: {cluster: d, user: u}}]
current-context: b
)");
  auto config = LoadKubeconfig(first + ":" + dir.path() + "/missing:" + second);
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->context, "b");  // the only current-context given
  EXPECT_EQ(config->server, "https://d");
  EXPECT_EQ(config->token, "first-token");
  auto a = LoadKubeconfig(first + ":" + second, "a");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->server, "https://first");
  EXPECT_FALSE(LoadKubeconfig(dir.path() + "/missing").ok());
}

TEST(KubeconfigTest, InClusterFromEnvironmentAndServiceAccount) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", "ca");
  dir.Write("namespace", "mgpu-system\n");
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    auto config = InClusterConfig(dir.path());
    ASSERT_TRUE(config.ok()) << config.message();
    EXPECT_EQ(config->server, "https://10.96.0.1:443");
    EXPECT_EQ(config->token_file, dir.path() + "/token");
    EXPECT_EQ(config->ca_file, dir.path() + "/ca.crt");
    EXPECT_EQ(config->default_namespace, "mgpu-system");
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00::1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
    auto config = InClusterConfig(dir.path());
    ASSERT_TRUE(config.ok()) << config.message();
    EXPECT_EQ(config->server, "https://[fd00::1]:6443");
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    EXPECT_FALSE(InClusterConfig(dir.path()).ok());
  }
}

TEST(KubeconfigTest, ResolutionOrderFlagThenEnvThenInCluster) {
  TempDir dir;
  auto config_for = [](const std::string& server) {
    return "clusters: [{name: c, cluster: {server: \"" + server +
           "\"}}]\ncontexts: [{name: a, context: {cluster: c}}]\ncurrent-context: a\n";
  };
  std::string flag = dir.Write("flag", config_for("https://from-flag"));
  std::string env = dir.Write("env", config_for("https://from-env"));
  ScopedEnv home("HOME", dir.path().c_str());  // no ~/.kube/config there
  ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
  {
    ScopedEnv kubeconfig("KUBECONFIG", env.c_str());
    auto from_flag = ResolveClusterConfig(flag);
    ASSERT_TRUE(from_flag.ok()) << from_flag.message();
    EXPECT_EQ(from_flag->server, "https://from-flag");
    auto from_env = ResolveClusterConfig("");
    ASSERT_TRUE(from_env.ok()) << from_env.message();
    EXPECT_EQ(from_env->server, "https://from-env");
  }
  ScopedEnv kubeconfig("KUBECONFIG", nullptr);
  EXPECT_FALSE(ResolveClusterConfig("").ok());
  std::filesystem::create_directories(dir.path() + "/.kube");
  dir.Write(".kube/config", config_for("https://from-home"));
  auto from_home = ResolveClusterConfig("");
  ASSERT_TRUE(from_home.ok()) << from_home.message();
  EXPECT_EQ(from_home->server, "https://from-home");
}

// The same file read by kubectl and by us resolves to the same server and credentials.
std::string RunKubectl(const std::string& args) {
  std::string output;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("kubectl " + args + " 2>/dev/null").c_str(), "r"),
                                             pclose);
  if (!pipe) return output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe.get())) output.append(buffer.data(), n);
  return output;
}

std::string Decode(const nlohmann::json& value) {
  // kubectl prints -data fields base64-encoded; decode through ParseKubeconfig's own path for comparison.
  auto config =
      ParseKubeconfig("clusters: [{name: c, cluster: {server: \"https://x\", certificate-authority-data: \"" +
                          value.get<std::string>() + "\"}}]\ncontexts: [{name: a, context: {cluster: c}}]\n",
                      "", "a");
  return config.ok() ? config->ca_data : "<invalid>";
}

TEST(KubeconfigTest, AgreesWithKubectl) {
  if (std::system("kubectl version --client >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "kubectl is not installed";
  TempDir dir;
  std::string path = dir.Write("config", kTwoContexts);
  for (const char* context : {"ctx-local", "ctx-remote"}) {
    SCOPED_TRACE(context);
    std::string out =
        RunKubectl("config view --minify --raw -o json --kubeconfig " + path + " --context " + context);
    nlohmann::json view = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(view.is_object()) << out;
    auto ours = LoadKubeconfig(path, context);
    ASSERT_TRUE(ours.ok()) << ours.message();
    const nlohmann::json& cluster = view["clusters"][0]["cluster"];
    const nlohmann::json& user = view["users"][0]["user"];
    std::string server = cluster["server"];
    while (server.ends_with('/')) server.pop_back();
    EXPECT_EQ(ours->server, server);
    EXPECT_EQ(ours->cluster_name, view["clusters"][0]["name"]);
    EXPECT_EQ(ours->user_name, view["users"][0]["name"]);
    EXPECT_EQ(ours->insecure_skip_tls_verify, cluster.value("insecure-skip-tls-verify", false));
    auto resolved = [&](const nlohmann::json& from, const char* key) {
      return from.contains(key) ? dir.path() + "/" + from[key].get<std::string>() : std::string();
    };
    EXPECT_EQ(ours->ca_file, resolved(cluster, "certificate-authority"));
    EXPECT_EQ(ours->ca_data, cluster.contains("certificate-authority-data")
                                 ? Decode(cluster["certificate-authority-data"])
                                 : std::string());
    EXPECT_EQ(ours->client_cert_file, resolved(user, "client-certificate"));
    EXPECT_EQ(ours->client_key_data,
              user.contains("client-key-data") ? Decode(user["client-key-data"]) : std::string());
    EXPECT_EQ(ours->token, user.value("token", ""));
    EXPECT_EQ(ours->default_namespace, view["contexts"][0]["context"].value("namespace", "default"));
  }
}

}  // namespace
}  // namespace mgpu::kube
