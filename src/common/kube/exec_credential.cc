#include "common/kube/exec_credential.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace mgpu::kube {
namespace {

// RFC 3339 as Kubernetes writes it: 2026-11-23T12:00:00Z, with optional fractional seconds or an offset.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  size_t i = static_cast<size_t>(consumed);
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  }
  long offset = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    int hours = 0, minutes = 0;
    if (std::sscanf(text.c_str() + i + 1, "%2d:%2d", &hours, &minutes) != 2) return std::nullopt;
    offset = (text[i] == '+' ? 1 : -1) * (hours * 3600L + minutes * 60L);
  } else if (i >= text.size() || (text[i] != 'Z' && text[i] != 'z')) {
    return std::nullopt;
  }
  const std::time_t seconds = timegm(&tm) - offset;
  if (seconds > 7'000'000'000) return std::chrono::system_clock::time_point::max();  // past the clock's range
  return std::chrono::system_clock::from_time_t(seconds);
}

}  // namespace

Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin) {
  const std::string name = "credential plugin " + plugin.command;
  std::vector<std::string> env_text;
  for (const auto& [key, value] : plugin.env) env_text.push_back(key + "=" + value);
  const nlohmann::json info = {
      {"apiVersion", plugin.api_version}, {"kind", "ExecCredential"}, {"spec", {{"interactive", false}}}};
  env_text.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  std::set<std::string, std::less<>> keys;  // the plugin's own entries replace inherited ones
  for (const std::string& e : env_text) keys.insert(e.substr(0, e.find('=')));
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!keys.contains(entry.substr(0, entry.find('=')))) envp.push_back(*e);
  }
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_text = {plugin.command};
  args_text.insert(args_text.end(), plugin.args.begin(), plugin.args.end());
  std::vector<char*> argv;
  for (std::string& a : args_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Error{"cannot run " + name + ": pipe: " + std::strerror(errno)};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, plugin.command.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    return Error{"cannot run " + name + ": " + std::strerror(spawned)};
  }
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(out[0], buffer, sizeof buffer);
    if (n > 0) {
      output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error{name + " failed (" +
                 (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                    : "killed by signal " + std::to_string(WTERMSIG(status))) +
                 ")"};
  }
  const nlohmann::json answer = nlohmann::json::parse(output, nullptr, false);
  if (!answer.is_object() || answer.value("kind", "") != "ExecCredential")
    return Error{name + " did not print an ExecCredential"};
  if (answer.value("apiVersion", "") != plugin.api_version) {
    return Error{name + " answered with apiVersion \"" + answer.value("apiVersion", "") + "\", not " +
                 plugin.api_version};
  }
  const nlohmann::json status_object = answer.value("status", nlohmann::json::object());
  const auto text = [&](const char* key) {
    auto it = status_object.find(key);
    return it != status_object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  ExecCredential credential{text("token"), text("clientCertificateData"), text("clientKeyData"),
                            std::nullopt};
  if (credential.client_cert_pem.empty() != credential.client_key_pem.empty())
    return Error{name + " gave a client certificate or key but not both"};
  if (credential.token.empty() && credential.client_cert_pem.empty())
    return Error{name + " gave neither a token nor a client certificate"};
  if (const std::string expires = text("expirationTimestamp"); !expires.empty()) {
    credential.expires = ParseRfc3339(expires);
    if (!credential.expires)
      return Error{name + " gave an expirationTimestamp that is not RFC 3339: " + expires};
  }
  return credential;
}

}  // namespace mgpu::kube
