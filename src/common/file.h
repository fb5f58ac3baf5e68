// Reading a whole file, for configs, manifests and fixtures; writing one whole, for state that must survive a
// crash.
#pragma once

#include <string>

#include "common/result.h"

namespace mgpu {

// The file's bytes, or "cannot read PATH".
Result<std::string> ReadFile(const std::string& path);

// Replaces `path` with `text` whole: written to PATH.tmp with `mode` (whatever the umask), synced, renamed
// over PATH, so a reader sees the old file or the new one, never a part. An error names the file and the
// cause.
Status WriteFileAtomically(const std::string& path, const std::string& text, unsigned mode);

}  // namespace mgpu
