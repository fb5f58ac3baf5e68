#include "dra/cdi.h"

#include <filesystem>

#include "common/dra.h"
#include "common/file.h"

namespace mgpu::dra {
namespace {

namespace fs = std::filesystem;

std::string FilePrefix(const Config& config) { return DriverName(config) + "-claim-"; }

}  // namespace

std::string CdiKind(const Config& config) { return DriverName(config) + "/claim"; }

std::string CdiDeviceId(const std::string& claim_uid, const Config& config) {
  return CdiKind(config) + "=" + claim_uid;
}

std::string CdiSpecPath(const std::string& claim_uid, const Config& config) {
  return (fs::path(config.dra.cdi_directory) / (FilePrefix(config) + claim_uid + ".json")).string();
}

std::string ClaimUidOfSpecFile(const std::string& file_name, const Config& config) {
  const std::string prefix = FilePrefix(config);
  constexpr std::string_view kSuffix = ".json";
  if (!file_name.starts_with(prefix) || !file_name.ends_with(kSuffix) ||
      file_name.size() <= prefix.size() + kSuffix.size())
    return "";
  return file_name.substr(prefix.size(), file_name.size() - prefix.size() - kSuffix.size());
}

nlohmann::json CdiSpec(const std::string& claim_uid, const node::ContainerEnvironment& environment,
                       const std::vector<std::string>& device_nodes, const Config& config) {
  nlohmann::json env = nlohmann::json::array(), mounts = nlohmann::json::array(),
                 nodes = nlohmann::json::array();
  for (const auto& [key, value] : environment.envs) env.push_back(key + "=" + value);
  for (const node::ContainerMount& m : environment.mounts) {
    nlohmann::json options = m.read_only ? nlohmann::json::array({"ro", "nosuid", "nodev", "bind"})
                                         : nlohmann::json::array({"rw", "nosuid", "nodev", "bind"});
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  for (const std::string& n : device_nodes) nodes.push_back({{"path", n}});
  nlohmann::json edits = {{"env", env}};
  if (!mounts.empty()) edits["mounts"] = mounts;
  if (!nodes.empty()) edits["deviceNodes"] = nodes;
  return {{"cdiVersion", kCdiVersion},
          {"kind", CdiKind(config)},
          {"devices", nlohmann::json::array({{{"name", claim_uid}, {"containerEdits", edits}}})}};
}

Status WriteCdiSpec(const std::string& path, const nlohmann::json& spec) {
  const fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec)
    return Error{"cannot create the CDI directory " + target.parent_path().string() + ": " + ec.message()};
  // 0644 whatever the umask: the runtime reads it.
  return WriteFileAtomically(path, spec.dump(2) + "\n", 0644);
}

Status RemoveCdiSpec(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return Error{"cannot remove the CDI spec " + path + ": " + ec.message()};
  return Status::Ok();
}

std::vector<std::string> ListCdiSpecs(const Config& config) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(config.dra.cdi_directory, ec), end; !ec && it != end; it.increment(ec)) {
    std::string uid = ClaimUidOfSpecFile(it->path().filename().string(), config);
    if (!uid.empty()) out.push_back(std::move(uid));
  }
  return out;
}

}  // namespace mgpu::dra
