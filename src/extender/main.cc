// mgpu-scheduler-extender: kube-scheduler's HTTP extender for fractional GPUs (filter, prioritize, bind,
// preempt). Wires the parts together.
//   mgpu-scheduler-extender [--config FILE] [--kubeconfig FILE] [--listen HOST:PORT] [--version]
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <map>
#include <string>

#include "common/config.h"
#include "common/daemon.h"
#include "common/kube/kubeconfig.h"
#include "extender/daemon.h"

int main(int argc, char** argv) {
  using namespace mgpu;
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, {"config", "kubeconfig", "listen"}, {"version"}, flags)) {
    std::cerr << "usage: mgpu-scheduler-extender [--config FILE] [--kubeconfig FILE] [--listen HOST:PORT] "
                 "[--version]\n";
    return kExitUsage;
  }
  if (flags.count("version")) {
    std::cout << "mgpu-scheduler-extender " << MGPU_VERSION << '\n';
    return 0;
  }
  Result<Config> config = flags["config"].empty() ? ParseConfig("") : LoadConfigFile(flags["config"]);
  if (!config.ok()) {
    std::cerr << "mgpu-scheduler-extender: " << config.message() << '\n';
    return kExitConfig;
  }
  if (!flags["listen"].empty()) config->extender.listen_address = flags["listen"];
  Result<kube::ClusterConfig> cluster = kube::ResolveClusterConfig(flags["kubeconfig"]);
  if (!cluster.ok()) {
    std::cerr << "mgpu-scheduler-extender: " << cluster.message() << '\n';
    return kExitConfig;
  }

  TerminationSignals signals;  // before any thread starts
  // Two malloc arenas, not glibc's 8 per core: each arena keeps pages its threads freed, and the extender's
  // threads mostly wait on the network (bench/RESULTS.md section 5: with 16 arenas on 2 cores, RSS after a
  // churn cycle's pods were deleted stayed 15-21 percent over the empty figure; with 2, 5-13 percent).
  mallopt(M_ARENA_MAX, 2);
  // A fixed trim threshold (glibc's default value): glibc gives a second arena's free top back only on a
  // free() past the threshold, which it otherwise raises after each large block freed (up to 64 MB), and
  // malloc_trim trims only the main arena's top. The image also turns malloc's per-thread caches off
  // (deploy/docker/extender.Dockerfile).
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  extender::Daemon daemon(*config);
  if (Status s = daemon.Start(std::move(*cluster)); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitServe;
  }
  const int signal = signals.Wait();
  spdlog::info("signal {}: stopping", signal);
  daemon.Stop();
  spdlog::info("stopped");
  return 0;
}
