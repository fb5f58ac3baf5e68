// CDI spec writing (docs/dra.md §5): one spec file per prepared claim in dra.cdiDirectory, of kind
// "<driver>/claim", holding one device named after the claim UID whose containerEdits are the claim's
// environment, mounts and device nodes. containerd reads the directory and applies the edits to every
// container the kubelet hands the CDI ID to. Files are written whole (a temporary file renamed into place),
// so the runtime never reads half a spec.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/result.h"
#include "node/environment.h"

namespace mgpu::dra {

inline constexpr const char* kCdiVersion = "0.6.0";

std::string CdiKind(const Config& config);                                    // "<driver>/claim"
std::string CdiDeviceId(const std::string& claim_uid, const Config& config);  // "<driver>/claim=<uid>"
std::string CdiSpecPath(const std::string& claim_uid,
                        const Config& config);  // <cdiDirectory>/<driver>-claim-<uid>.json
// The claim UID of a spec file name this driver writes ("<driver>-claim-<uid>.json"), or "" for any other.
std::string ClaimUidOfSpecFile(const std::string& file_name, const Config& config);

// The spec: environment as KEY=VALUE lines in key order, mounts (read-only ones "ro"), device nodes.
nlohmann::json CdiSpec(const std::string& claim_uid, const node::ContainerEnvironment& environment,
                       const std::vector<std::string>& device_nodes, const Config& config);

// Writes `spec` at `path` (mode 0644) through a temporary file in the same directory; creates the directory.
Status WriteCdiSpec(const std::string& path, const nlohmann::json& spec);
// Removes the file; a file that is not there is already removed.
Status RemoveCdiSpec(const std::string& path);
// The claim UIDs of every spec of this driver in dra.cdiDirectory (none when it does not exist).
std::vector<std::string> ListCdiSpecs(const Config& config);

}  // namespace mgpu::dra
