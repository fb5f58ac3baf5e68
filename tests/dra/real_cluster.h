// What the DRA tests on the real v1.36.2 components share: a cluster of scripts/cluster.sh (its state folder,
// its env file, an admin API client and kubectl), commands run through the shell, and programs of this build
// run beside the cluster (the extender, the node daemon) and stopped by their pid. A cluster that cannot be
// had because the Kubernetes binaries are missing is a skip, said once.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/file.h"
#include "common/kube/client.h"
#include "common/kube/kubeconfig.h"
#include "common/yaml_json.h"

namespace mgpu::testing::dra {

struct Output {
  int rc = 0;
  std::string out;  // stdout and stderr
};

// Polls `done` every `interval` until it holds or `timeout` passes; returns its last answer. For predicates
// that ask the API server: test_env.h's WaitUntil polls every 2 ms, which would load a real API server on a
// small machine with hundreds of requests a second.
inline bool Poll(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                 std::chrono::milliseconds interval = std::chrono::milliseconds(500)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(interval);
  }
  return true;
}

inline Output Sh(const std::string& command) {
  Output result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {127, "popen failed: " + command};
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return result;
}

// A program of this build run in the background, its output in `log`; killed (SIGTERM, then SIGKILL after
// 10 s) when destroyed unless Kill() was called.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::string& log) {
    pid_ = fork();
    if (pid_ != 0) return;
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  ~Background() { Stop(SIGTERM); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // Sends `signal` and waits for the program to end; true when it ended by itself after SIGTERM (status 0).
  bool Stop(int signal) {
    if (pid_ <= 0) return true;
    kill(pid_, signal);
    int status = 0;
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
      usleep(100000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return false;
  }
  bool Running() const { return pid_ > 0 && kill(pid_, 0) == 0; }

 private:
  pid_t pid_ = -1;
};

// One cluster of scripts/cluster.sh for a test program.
class Cluster {
 public:
  // `state` and `port_base` as cluster.sh takes them; `up_options` e.g. "--no-kubelet --api-nodes 1000".
  Cluster(std::string repo, std::string state, std::string port_base)
      : repo_(std::move(repo)), state_(std::move(state)), port_base_(std::move(port_base)) {}
  ~Cluster() { Down(); }

  // "" when up (with mgpu's DRA DeviceClasses applied); else why not. `skipped` is set when the Kubernetes
  // binaries are missing.
  std::string Up(const std::string& up_options, bool& skipped) {
    std::filesystem::create_directories(state_);
    const Output binaries = Sh(Script("binaries"));
    if (binaries.rc == 3) {
      skipped = true;
      return binaries.out;
    }
    const Output up = Sh(Script("up") + " " + up_options);
    if (up.rc != 0) return "the cluster did not come up:\n" + up.out + Logs();
    up_ = true;
    std::ifstream env(state_ + "/env");
    for (std::string line; std::getline(env, line);) {
      const size_t eq = line.find('=');
      if (line.rfind("export ", 0) == 0 && eq != std::string::npos)
        env_[line.substr(7, eq - 7)] = line.substr(eq + 1);
    }
    kubectl_ = env_["MGPU_K8S_BIN"] + "/kubectl --kubeconfig " + state_ + "/kubeconfig";
    auto config = kube::ResolveClusterConfig(state_ + "/kubeconfig");
    if (!config.ok()) return config.message();
    auto client = kube::Client::Create(*config, {.request_timeout = std::chrono::seconds(30)});
    if (!client.ok()) return client.message();
    client_ = std::move(*client);
    const Output classes = Sh(kubectl_ + " apply -f " + repo_ + "/deploy/dra/deviceclasses.yaml");
    if (classes.rc != 0) return "the DeviceClasses were refused: " + classes.out;
    return "";
  }

  void Down() {
    extender_.reset();
    if (up_) Sh(Script("down"));
    up_ = false;
  }

  // mgpu-scheduler-extender of `build` on this machine, where the cluster's kube-scheduler configuration calls
  // it (the node's address with a kubelet, loopback without: it listens on both), serving a certificate for
  // the names it is called by (the scheduler's serverName, and 127.0.0.1 for the webhooks) signed by the CA
  // cluster.sh gave the scheduler; with `webhooks`, deploy/dra/webhook.yaml pointed at it. "" once it is
  // ready, else why not. It stops with the cluster.
  std::string StartExtender(const std::string& build, bool webhooks) {
    const std::string tls = state_ + "/extender-tls";
    const Output cert = Sh(
        "cd " + tls +
        " && openssl req -new -newkey rsa:2048 -nodes -keyout dra.key -subj /CN=mgpu-dra -out dra.csr "
        "&& printf 'subjectAltName=DNS:mgpu-scheduler-extender.mgpu-system.svc,IP:127.0.0.1\\n' > dra.ext && "
        "openssl x509 -req -in dra.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile dra.ext "
        "-out dra.crt");
    if (cert.rc != 0) return "cannot make the extender's certificate: " + cert.out;
    const std::string port = Env("MGPU_CLUSTER_EXTENDER_PORT");
    const std::string config = state_ + "/dra-extender.yaml";
    std::ofstream(config) << "extender:\n  listenAddress: 0.0.0.0:" << port << "\n  tlsCertFile: " << tls
                          << "/dra.crt\n  tlsKeyFile: " << tls << "/dra.key\n";
    extender_ = std::make_unique<Background>(
        std::vector<std::string>{build + "/src/extender/mgpu-scheduler-extender", "--kubeconfig",
                                 state_ + "/kubeconfig", "--config", config},
        state_ + "/logs/dra-extender.log");
    if (!Poll([&] { return Sh("curl -sfk https://127.0.0.1:" + port + "/readyz").rc == 0; },
              std::chrono::seconds(300)))
      return "the extender did not get ready: " + Sh("tail -20 " + state_ + "/logs/dra-extender.log").out;
    if (!webhooks) return "";
    Result<std::string> ca = ReadFile(tls + "/caBundle");
    if (!ca.ok()) return ca.message();
    std::string bundle = *ca;
    while (!bundle.empty() && (bundle.back() == '\n' || bundle.back() == ' ')) bundle.pop_back();
    // deploy/dra/webhook.yaml, with the extender's address on this machine instead of its Service.
    Result<std::string> yaml = ReadFile(repo_ + "/deploy/dra/webhook.yaml");
    if (!yaml.ok()) return yaml.message();
    Result<std::vector<nlohmann::json>> docs = YamlDocumentsToJson(*yaml);
    if (!docs.ok()) return docs.message();
    const std::string group = "/apis/admissionregistration.k8s.io/v1";
    const kube::ApiResource mutating{group, "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                                     false};
    const kube::ApiResource validating{group, "validatingwebhookconfigurations",
                                       "ValidatingWebhookConfiguration", false};
    for (nlohmann::json doc : *docs) {
      for (nlohmann::json& w : doc["webhooks"]) {
        const std::string path = w["clientConfig"]["service"]["path"];
        w["clientConfig"] = {{"url", "https://127.0.0.1:" + port + path}, {"caBundle", bundle}};
      }
      kube::ApiResult r =
          client_->Create(doc["kind"] == "MutatingWebhookConfiguration" ? mutating : validating, "", doc);
      if (!r.ok()) return "the API server refused " + doc["kind"].get<std::string>() + ": " + r.message();
    }
    return "";
  }

  std::string Script(const std::string& verb) const {
    return "bash " + repo_ + "/scripts/cluster.sh " + verb + " --state-dir " + state_ + " --port-base " +
           port_base_;
  }
  std::string Logs() const { return Sh(Script("logs") + " --lines 30").out; }
  const std::string& state() const { return state_; }
  const std::string& kubectl() const { return kubectl_; }
  std::string Env(const std::string& key) const { return env_.count(key) ? env_.at(key) : ""; }
  kube::Client& client() { return *client_; }

 private:
  const std::string repo_, state_, port_base_;
  bool up_ = false;
  std::string kubectl_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<Background> extender_;
};

}  // namespace mgpu::testing::dra
