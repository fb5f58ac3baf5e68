// The scheduler→kubelet hand-off at cluster speed (issue: "hand-off at real-cluster speed"). Drives the real
// mgpu-scheduler-extender binary, started as its own process against the fake API server, the way
// kube-scheduler does with deploy/'s configuration: one scheduling cycle at a time (choose over every node,
// NodeNames mode; --verbs filter-prioritize: filter, then prioritize over the nodes that passed), binds in
// parallel (up to --in-flight), a failed bind retried after kube-scheduler's initial backoff (1 s, doubling
// to 10 s). A confirmer plays the device plugin: --delay-ms after a pod is bound it writes D/gpu-allocated.
// Reports pods/s, the extender's CPU per pod (/proc), failed binds, binds that waited (the extender's
// metric), and checks that no card is over-committed.
// What the real cluster costs besides the extender (issue 27): the fake API server and this driver cost next
// to nothing, where kube-scheduler, kube-apiserver, etcd and the watchers spend CPU on every pod (bench/
// realcluster_bind.sh measures it per process). --charge scheduler=S,cluster=C burns that CPU here, in ms
// per pod: S in the scheduling cycle (kube-scheduler's own work, serial), C on the bind's thread once the pod
// is bound (the API server, etcd, the controllers and the plugins, in parallel), so that on the same machine
// the rate is the one the real cluster's CPU allows (RESULTS section 5 compares the two).
// --rss-pods N instead measures the extender's resident memory per cached pod; with --cycles N it schedules
// --pods pods through the extender, confirms and deletes them, N times, and prints RSS and heap after each.
// --slow-clients N keeps N slow-loris connections open from 127.0.0.2 meanwhile (each sends a /filter head
// announcing a large body, then a byte every 500 ms, and reconnects when the extender closes it);
// --per-client N sets extender.httpConnectionsPerClient.
//   mgpu_bind_throughput [--nodes 1000] [--pods 2000] [--delay-ms 1000] [--shapes identical|mix]
//                        [--verbs choose|filter-prioritize] [--charge scheduler=S,cluster=C]
//                        [--in-flight 16] [--api-delay-ms 0] [--rss-pods 0] [--cycles 0] [--slow-clients 0]
//                        [--per-client N]
#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "common/codec.h"
#include "common/config.h"
#include "common/daemon.h"
#include "testing/fake_apiserver.h"
#include "testing/test_env.h"

extern char** environ;

namespace mgpu {
namespace {

using nlohmann::json;
using testing::FakeApiServer;
using Clock = std::chrono::steady_clock;

struct Shape {
  int core;
  int64_t memory_mib;
};

json NodeObject(int i) {
  // The cluster: 8 × 80 GiB, 2 × 24 GiB and 4 × 16 GiB nodes, in equal numbers.
  static const struct {
    int cards;
    int64_t mib;
    const char* model;
  } kKinds[] = {{8, 81920, "NVIDIA H100"}, {2, 24576, "NVIDIA A10"}, {4, 16384, "Tesla T4"}};
  const auto& kind = kKinds[i % 3];
  const std::string name = "node-" + std::to_string(i);
  NodeInventory inventory;
  for (int c = 0; c < kind.cards; ++c)
    inventory.cards.push_back(Card{c, "GPU-" + name + "-" + std::to_string(c), kind.model, kind.mib, true});
  return {{"metadata",
           {{"name", name}, {"annotations", {{Config().Names().gpu_inventory, EncodeInventory(inventory)}}}}},
          {"status", {{"allocatable", {{"cpu", "64"}, {"memory", "512Gi"}}}}}};
}

json PodObject(const std::string& name, const Shape& shape) {
  const ResourceNames names = Config().Names();
  return {
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"schedulerName", "default-scheduler"},
        {"containers",
         {{{"name", "main"},
           {"image", "registry.example/infer:1"},
           {"resources",
            {{"limits",
              {{names.core, std::to_string(shape.core)}, {names.memory, std::to_string(shape.memory_mib)}}},
             {"requests", {{"cpu", "100m"}, {"memory", "1Gi"}}}}}}}}}},
      {"status", {{"phase", "Pending"}}}};
}

// utime + stime of a process, in milliseconds.
double CpuMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field && i <= 15; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return 1000 * ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Spends `ms` of this thread's CPU (the cost of what the fake cluster does not do).
void Burn(double ms) {
  if (ms <= 0) return;
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  volatile uint64_t sink = 0;
  do {
    for (int i = 0; i < 1000; ++i) sink = sink * 31 + static_cast<uint64_t>(i);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1e3 + (now.tv_nsec - start.tv_nsec) / 1e6 < ms);
}

// A number field of /proc/PID/status ("VmRSS:" in KiB, "Threads:"); -1 when absent.
int64_t StatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  return -1;
}

int64_t RssKiB(pid_t pid) { return StatusField(pid, "VmRSS:"); }

class Extender {
 public:
  Extender(const FakeApiServer& api, const std::string& dir, int per_client) : port_(testing::FreePort()) {
    const std::string kubeconfig = dir + "/kubeconfig", config = dir + "/config.yaml";
    std::ofstream(kubeconfig) << api.KubeconfigYaml();
    std::ofstream out(config);
    out << "extender:\n  listenAddress: 127.0.0.1:" << port_ << "\n";
    if (per_client > 0) out << "  httpConnectionsPerClient: " << per_client << "\n";
    out.close();
    const std::string listen = "127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {MGPU_EXTENDER_BINARY, "--kubeconfig", kubeconfig, "--config", config,
                                     "--listen",           listen};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, (dir + "/extender.log").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Extender() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool WaitReady() const {
    httplib::Client http(Url());
    for (int i = 0; i < 600 && pid_ > 0; ++i) {
      if (auto res = http.Get("/readyz"); res && res->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

double Metric(const std::string& url, const std::string& name) {
  httplib::Client http(url);
  auto res = http.Get("/metrics");
  if (!res) return -1;
  const size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + name.size() + 2));
}

// Per card, what the bound pods hold (gpu-allocated, else gpu-assignment); the cards over 100 percent core or
// over their memory.
int OverCommitted(const FakeApiServer& api) {
  const ResourceNames names = Config().Names();
  std::map<std::string, int64_t> capacity;
  for (const json& node : api.List("nodes")) {
    auto inv = DecodeInventory(node["metadata"]["annotations"][names.gpu_inventory].get<std::string>());
    for (const Card& c : inv->cards) capacity[c.uuid] = c.memory_mib;
  }
  std::map<std::string, std::pair<int, int64_t>> used;
  for (const json& pod : api.List("pods")) {
    const json& a = pod["metadata"].value("annotations", json::object());
    const std::string text = a.contains(names.gpu_allocated)    ? a[names.gpu_allocated].get<std::string>()
                             : a.contains(names.gpu_assignment) ? a[names.gpu_assignment].get<std::string>()
                                                                : "";
    if (text.empty() || pod["spec"].value("nodeName", "").empty()) continue;
    auto assignment = DecodeAssignment(text);
    for (const ContainerAssignment& c : assignment->containers)
      for (const CardShare& s : c.cards) {
        used[s.uuid].first += s.core;
        used[s.uuid].second += s.memory_mib;
      }
  }
  int over = 0;
  for (const auto& [uuid, u] : used) over += u.first > 100 || u.second > capacity[uuid];
  return over;
}

struct Options {
  int nodes = 1000, pods = 2000, delay_ms = 1000, in_flight = 16, api_delay_ms = 0, rss_pods = 0, cycles = 0;
  int slow_clients = 0, per_client = 0;
  std::string shapes = "identical";
  std::string verbs = "choose";
  double scheduler_ms = 0, cluster_ms = 0;  // --charge
};

// Slow-loris connections from 127.0.0.2: each sends a /filter head announcing a 1 MB body, then one byte of
// it every 500 ms; when the extender answers or closes, it counts what it got and connects again.
class SlowClients {
 public:
  SlowClients(int port, int count) {
    if (count > 0) thread_ = std::thread([this, port, count] { Run(port, count); });
  }
  ~SlowClients() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::string Summary() const {
    return "slow_clients_closed_408=" + std::to_string(timeouts_) + " refused_503=" + std::to_string(busy_) +
           " other_closes=" + std::to_string(other_);
  }

 private:
  static int Connect(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in from{}, to{};
    from.sin_family = to.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons(static_cast<uint16_t>(port));
    (void)bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    (void)connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));  // in progress: the first send waits
    return fd;
  }
  void Run(int port, int count) {
    const std::string head = "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{";
    std::vector<int> fds(count);
    std::vector<bool> sent_head(count, false);
    for (int& fd : fds) fd = Connect(port);
    while (!stop_) {
      for (int i = 0; i < count; ++i) {
        const char* bytes = sent_head[i] ? " " : head.c_str();
        const size_t n = sent_head[i] ? 1 : head.size();
        if (send(fds[i], bytes, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n)) sent_head[i] = true;
        char reply[512];
        const ssize_t got = recv(fds[i], reply, sizeof(reply) - 1, 0);
        if (got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
          const std::string text = got > 0 ? std::string(reply, static_cast<size_t>(got)) : "";
          if (text.find(" 408 ") != std::string::npos)
            ++timeouts_;
          else if (text.find(" 503 ") != std::string::npos)
            ++busy_;
          else
            ++other_;
          close(fds[i]);
          fds[i] = Connect(port);
          sent_head[i] = false;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (int fd : fds) close(fd);
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> timeouts_{0}, busy_{0}, other_{0};
  std::thread thread_;
};

struct Scheduled {
  double seconds = 0;  // from the first cycle until the last pod was bound
  int bind_failures = 0;
  std::map<std::string, int> failure_reasons;
};

// Creates `count` pods named <prefix><i> and schedules them all through the extender as kube-scheduler would,
// confirming each --delay-ms after its bind; returns once every pod is bound and confirmed.
Scheduled SchedulePods(const Options& o, FakeApiServer& api, Extender& extender, const std::string& prefix,
                       int count) {
  const ResourceNames names = Config().Names();
  std::vector<Shape> shapes = {{20, 4096}};
  // Four shapes that share sizes pairwise (20 core, 4096 and 8192 MiB): the ambiguous pairs of DESIGN §5.5.
  if (o.shapes == "mix") shapes = {{20, 4096}, {20, 8192}, {50, 8192}, {30, 4096}};
  for (int i = 0; i < count; ++i)
    (void)api.Create("pods", PodObject(prefix + std::to_string(i), shapes[i % shapes.size()]));
  std::vector<std::string> node_names;
  for (int i = 0; i < o.nodes; ++i) node_names.push_back("node-" + std::to_string(i));
  const std::string names_json = json(node_names).dump();

  std::atomic<bool> done{false};
  // The device plugin: confirms each bound pod `delay_ms` after it first sees it bound.
  std::thread confirmer([&] {
    std::map<std::string, Clock::time_point> seen;
    while (!done) {
      const auto now = Clock::now();
      for (const json& pod : api.List("pods", "default")) {
        const json& a = pod["metadata"].value("annotations", json::object());
        if (pod["spec"].value("nodeName", "").empty() || !a.contains(names.gpu_assignment) ||
            a.contains(names.gpu_allocated))
          continue;
        const std::string name = pod["metadata"]["name"];
        auto [it, fresh] = seen.emplace(name, now);
        if (now - it->second < std::chrono::milliseconds(o.delay_ms)) continue;
        (void)api.MergePatch(
            "pods", "default", name,
            {{"metadata", {{"annotations", {{names.gpu_allocated, a[names.gpu_assignment]}}}}}});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  struct Queued {
    std::string name;
    Clock::time_point not_before;
    int failures = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Queued> queue;
  for (int i = 0; i < count; ++i) queue.push_back({prefix + std::to_string(i), Clock::now(), 0});
  int in_flight = 0, bound = 0;
  Scheduled out;
  const auto post = [&](const std::string& path, const std::string& body) -> std::optional<json> {
    httplib::Client http(extender.Url());
    http.set_read_timeout(std::chrono::seconds(30));
    auto res = http.Post(path, body, "application/json");
    if (!res || res->status != 200) return std::nullopt;
    json reply = json::parse(res->body, nullptr, false);
    return reply.is_discarded() ? std::nullopt : std::optional<json>(std::move(reply));
  };
  const std::string filter_path = o.verbs == "choose" ? "/choose" : "/filter";
  std::mt19937 tie_rng(7);
  const auto start = Clock::now();
  std::vector<std::thread> binders;
  while (true) {
    Queued next;
    {
      std::unique_lock lock(mu);
      // kube-scheduler's active queue goes first; pods backing off wait in their own queue.
      auto first_ready = queue.end();
      const auto ready = [&] {
        if (bound == count) return true;
        if (in_flight >= o.in_flight) return false;
        const auto now = Clock::now();
        first_ready =
            std::find_if(queue.begin(), queue.end(), [&](const Queued& q) { return q.not_before <= now; });
        return first_ready != queue.end();
      };
      while (!ready()) cv.wait_for(lock, std::chrono::milliseconds(20));
      if (bound == count) break;
      next = *first_ready;
      queue.erase(first_ready);
      ++in_flight;
    }
    Burn(o.scheduler_ms);  // kube-scheduler's own filters and scores over the nodes
    const json pod = *api.Get("pods", "default", next.name);
    const json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", json::parse(names_json)}};
    const std::optional<json> filtered = post(filter_path, args.dump());
    json passed = filtered ? filtered->value("NodeNames", json::array()) : json::array();
    if (passed.is_null()) passed = json::array();
    std::string chosen;
    if (passed.size() == 1) chosen = passed[0];
    if (passed.size() > 1) {
      const json pargs = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", passed}};
      const std::optional<json> scored = post("/prioritize", pargs.dump());
      // kube-scheduler's selectHost: uniformly among the nodes of the highest score.
      int best = -1, ties = 0;
      for (const json& s : scored ? *scored : json::array()) {
        const int score = s.value("Score", 0);
        if (score > best) best = score, ties = 0;
        if (score == best && std::uniform_int_distribution<int>(0, ties++)(tie_rng) == 0)
          chosen = s.value("Host", "");
      }
    }
    if (chosen.empty()) {
      std::lock_guard lock(mu);
      --in_flight;
      queue.push_back({next.name, Clock::now() + std::chrono::seconds(1), next.failures + 1});
      continue;
    }
    const json bind = {{"PodName", next.name},
                       {"PodNamespace", "default"},
                       {"PodUID", pod["metadata"]["uid"]},
                       {"Node", chosen}};
    binders.emplace_back([&, next, body = bind.dump()] {
      const std::optional<json> reply = post("/bind", body);
      const std::string error = reply ? reply->value("Error", "") : "no answer";
      if (error.empty()) Burn(o.cluster_ms);  // the API server, etcd and the watchers on this pod
      std::lock_guard lock(mu);
      --in_flight;
      if (error.empty()) {
        ++bound;
      } else {
        ++out.bind_failures;
        out.failure_reasons[error.substr(0, error.find(':'))]++;
        const auto backoff = std::chrono::seconds(std::min(10, 1 << std::min(next.failures, 4)));
        queue.push_back({next.name, Clock::now() + backoff, next.failures + 1});
      }
      cv.notify_all();
    });
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::thread& t : binders) t.join();
  // Let every confirmation land.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.delay_ms + 300));
  done = true;
  confirmer.join();
  return out;
}

int RunThroughput(const Options& o, FakeApiServer& api, Extender& extender) {
  SlowClients slow(extender.port(), o.slow_clients);
  const double cpu_before = CpuMs(extender.pid());
  const Scheduled run = SchedulePods(o, api, extender, "p-", o.pods);
  const double cpu_ms = CpuMs(extender.pid()) - cpu_before;
  const int over = OverCommitted(api);
  std::printf(
      "nodes=%d pods=%d shapes=%s verbs=%s delay_ms=%d in_flight=%d api_delay_ms=%d charge_ms=%.2f,%.2f\n",
      o.nodes, o.pods, o.shapes.c_str(), o.verbs.c_str(), o.delay_ms, o.in_flight, o.api_delay_ms,
      o.scheduler_ms, o.cluster_ms);
  std::printf(
      "pods_per_second=%.1f seconds=%.2f extender_cpu_ms_per_pod=%.2f failed_binds=%d binds_waited=%.0f "
      "over_committed_cards=%d\n",
      o.pods / run.seconds, run.seconds, cpu_ms / o.pods, run.bind_failures,
      Metric(extender.Url(), "mgpu_extender_bind_waits_total"), over);
  for (const auto& [reason, n] : run.failure_reasons)
    std::printf("  failed bind: %d x %s\n", n, reason.c_str());
  if (o.slow_clients > 0) {
    slow.Stop();
    std::printf("slow_clients=%d %s\n", o.slow_clients, slow.Summary().c_str());
  }
  return over == 0 ? 0 : 1;
}

// Resident memory of the extender with `rss_pods` bound GPU pods cached, against none; then after deleting
// them.
int RunRss(const Options& o, FakeApiServer& api, Extender& extender) {
  const ResourceNames names = Config().Names();
  const auto settle = [&] {
    // The informer has caught up when /metrics shows the pods' cores; wait until RSS stops moving for 3 s
    // (the extender hands freed memory back a second or two after a wave of deletions).
    int64_t last = -1;
    int same = 0;
    for (int i = 0; i < 200 && same < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const int64_t now = RssKiB(extender.pid());
      same = now == last ? same + 1 : 0;
      last = now;
    }
    return last;
  };
  const int64_t empty = settle();
  if (o.cycles > 0) {
    // Churn: each cycle schedules --pods pods through the extender, then deletes them.
    std::printf("cycle 0: rss_kib=%lld heap_bytes=%.0f threads=%lld\n", static_cast<long long>(empty),
                Metric(extender.Url(), "mgpu_extender_heap_bytes"),
                static_cast<long long>(StatusField(extender.pid(), "Threads:")));
    for (int c = 1; c <= o.cycles; ++c) {
      const std::string prefix = "c" + std::to_string(c) + "-";
      const Scheduled run = SchedulePods(o, api, extender, prefix, o.pods);
      const int64_t full = settle();
      const double full_heap = Metric(extender.Url(), "mgpu_extender_heap_bytes");
      for (int i = 0; i < o.pods; ++i) (void)api.Delete("pods", "default", prefix + std::to_string(i));
      const int64_t after = settle();
      std::printf(
          "cycle %d: %d pods in %.1f s; rss_kib with them=%lld heap_bytes=%.0f; after deleting them "
          "rss_kib=%lld heap_bytes=%.0f threads=%lld\n",
          c, o.pods, run.seconds, static_cast<long long>(full), full_heap, static_cast<long long>(after),
          Metric(extender.Url(), "mgpu_extender_heap_bytes"),
          static_cast<long long>(StatusField(extender.pid(), "Threads:")));
      std::fflush(stdout);
    }
    return 0;
  }
  for (int i = 0; i < o.rss_pods; ++i) {
    json pod = PodObject("r-" + std::to_string(i), {10, 1024});
    const std::string node = "node-" + std::to_string(i % o.nodes);
    pod["spec"]["nodeName"] = node;
    pod["status"]["phase"] = "Running";
    pod["metadata"]["annotations"][names.gpu_allocated] = EncodeAssignment(
        Assignment{{ContainerAssignment{"main", {CardShare{"GPU-" + node + "-0", 10, 0, 1024}}}}});
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = pod.dump();
    pod["metadata"]["labels"] = {{"app", "infer"}, {"pod-template-hash", "5d8f7c9b6"}};
    (void)api.Create("pods", pod);
  }
  const int64_t full = settle();
  const double full_heap = Metric(extender.Url(), "mgpu_extender_heap_bytes");
  for (int i = 0; i < o.rss_pods; ++i) (void)api.Delete("pods", "default", "r-" + std::to_string(i));
  const int64_t after = settle();
  const double after_heap = Metric(extender.Url(), "mgpu_extender_heap_bytes");
  std::printf(
      "rss_kib_empty=%lld rss_kib_with_%d_pods=%lld rss_kib_after_delete=%lld bytes_per_pod=%.0f "
      "heap_bytes_per_pod=%.0f\n",
      static_cast<long long>(empty), o.rss_pods, static_cast<long long>(full), static_cast<long long>(after),
      (full - empty) * 1024.0 / o.rss_pods, (full_heap - after_heap) / o.rss_pods);
  return 0;
}

}  // namespace
}  // namespace mgpu

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv,
                  {"nodes", "pods", "delay-ms", "shapes", "verbs", "charge", "in-flight", "api-delay-ms",
                   "rss-pods", "cycles", "slow-clients", "per-client"},
                  {}, flags)) {
    std::cerr
        << "usage: mgpu_bind_throughput [--nodes N] [--pods N] [--delay-ms MS] [--shapes identical|mix] "
           "[--verbs choose|filter-prioritize] [--charge scheduler=MS,cluster=MS] [--in-flight N] "
           "[--api-delay-ms MS] [--rss-pods N] [--cycles N] [--slow-clients N] [--per-client N]\n";
    return kExitUsage;
  }
  Options o;
  const auto number = [&](const char* name, int& into) {
    if (flags.count(name)) into = std::stoi(flags[name]);
  };
  number("nodes", o.nodes);
  number("pods", o.pods);
  number("delay-ms", o.delay_ms);
  number("in-flight", o.in_flight);
  number("api-delay-ms", o.api_delay_ms);
  number("rss-pods", o.rss_pods);
  number("slow-clients", o.slow_clients);
  number("per-client", o.per_client);
  number("cycles", o.cycles);
  if (flags.count("shapes")) o.shapes = flags["shapes"];
  if (flags.count("verbs")) o.verbs = flags["verbs"];
  if (o.verbs != "choose" && o.verbs != "filter-prioritize") {
    std::cerr << "mgpu_bind_throughput: --verbs must be choose or filter-prioritize\n";
    return kExitUsage;
  }
  if (flags.count("charge") && std::sscanf(flags["charge"].c_str(), "scheduler=%lf,cluster=%lf",
                                           &o.scheduler_ms, &o.cluster_ms) != 2) {
    std::cerr << "mgpu_bind_throughput: --charge must be scheduler=MS,cluster=MS (CPU ms per pod)\n";
    return kExitUsage;
  }
  if (o.cycles > 0 && o.rss_pods == 0) o.rss_pods = 1;  // the memory mode
  spdlog::set_level(spdlog::level::warn);

  testing::FakeApiServer api;
  if (!api.Start().ok()) return 1;
  for (int i = 0; i < o.nodes; ++i) (void)api.Create("nodes", NodeObject(i));
  if (o.api_delay_ms > 0) {
    // Every write takes this long at the API server (etcd and admission on a real one).
    api.InjectFault(testing::Fault{.action = testing::Fault::Action::kDelay,
                                   .method = "PATCH",
                                   .delay = std::chrono::milliseconds(o.api_delay_ms),
                                   .times = -1});
    api.InjectFault(testing::Fault{.action = testing::Fault::Action::kDelay,
                                   .method = "POST",
                                   .delay = std::chrono::milliseconds(o.api_delay_ms),
                                   .times = -1});
  }
  char dir[] = "/tmp/mgpu-bind-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  Extender extender(api, dir, o.per_client);
  if (!extender.WaitReady()) {
    std::cerr << "the extender did not become ready; see " << dir << "/extender.log\n";
    return 1;
  }
  return o.rss_pods > 0 ? RunRss(o, api, extender) : RunThroughput(o, api, extender);
}
