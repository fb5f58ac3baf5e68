// kubectl-mgpu: the kubectl plugin; kubectl runs it as `kubectl mgpu` when it is on PATH. Wires the logger
// (warnings to stderr, so that -o json stays clean) and runs the command.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "cli/kubectl_mgpu.h"

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("kubectl-mgpu");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return mgpu::cli::Run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
