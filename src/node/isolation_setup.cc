#include "node/isolation_setup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "common/file.h"
#include "guard/state.h"
#include "node/environment.h"

namespace mgpu::node {
namespace {

namespace fs = std::filesystem;

// Writes `content` to `path` unless it holds exactly that, through a renamed temporary file so that a
// container mounting the old file never sees half of the new one.
Status WriteIfDifferent(const std::string& path, const std::string& content, fs::perms perms,
                        const char* what) {
  if (Result<std::string> old = ReadFile(path); old.ok() && *old == content) return Status::Ok();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) return Error{"cannot write " + tmp + ", " + what};
  }
  std::error_code ec;
  fs::permissions(tmp, perms, ec);
  fs::rename(tmp, path, ec);
  if (ec) return Error{"cannot write " + path + ", " + what + ": " + ec.message()};
  return Status::Ok();
}

// The card's state file: created (world-writable) when absent, started afresh when no process uses it and
// it is not a valid state of this card; a file in use is left alone (the guards step aside on it).
Status PrepareCardState(const std::string& dir, const Card& card) {
  const std::string card_dir = dir + "/" + card.uuid;
  std::error_code ec;
  fs::create_directories(card_dir, ec);
  // Every container user writes here; the sticky bit keeps them from removing the plugin's file.
  fs::permissions(card_dir, fs::perms::all | fs::perms::sticky_bit, ec);
  if (ec) return Error{"cannot create the guard state directory " + card_dir + ": " + ec.message()};
  const std::string path = guard::StatePath(dir, card.uuid);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return Error{"cannot open the guard state file " + path};
  fchmod(fd, 0666);
  auto file = std::make_unique<guard::StateFile>();
  const ssize_t n = pread(fd, file.get(), sizeof(guard::StateFile), 0);
  const char* why =
      n < 0 ? "unreadable" : guard::CheckState(*file, static_cast<size_t>(n), card.uuid.c_str());
  Status status = Status::Ok();
  if (*why && !guard::AnyLockHeld(fd)) {
    if (n > 0) spdlog::warn("card={} guard state {}: {}, started afresh", card.uuid, path, why);
    guard::InitState(*file, card.uuid.c_str());
    if (ftruncate(fd, 0) != 0 ||
        pwrite(fd, file.get(), sizeof(guard::StateFile), 0) != sizeof(guard::StateFile))
      status = Error{"cannot write the guard state file " + path};
  } else if (*why) {
    spdlog::warn("card={} guard state {}: {}, but processes use it: left alone", card.uuid, path, why);
  }
  close(fd);
  return status;
}

Status PrepareGuard(const IsolationConfig& isolation, const std::vector<Card>& cards) {
  const std::string& library = isolation.guard_library_path;
  std::error_code ec;
  fs::create_directories(fs::path(library).parent_path(), ec);
  const std::string& source = isolation.guard_library_source;
  if (!source.empty() && fs::exists(source)) {
    const Result<std::string> bytes = ReadFile(source);
    if (!bytes.ok())
      return Error{"cannot read the guard library " + source + " (isolation.guardLibrarySource)"};
    const fs::perms mode = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec;
    if (Status s = WriteIfDifferent(library, *bytes, mode, "the guard library containers preload"); !s.ok())
      return s;
  }
  if (!fs::exists(library)) {
    return Error{"the guard library " + library +
                 " (isolation.guardLibraryPath) does not exist: install libmgpu-guard.so there or set "
                 "isolation.guardLibrarySource to a copy of it"};
  }
  const fs::perms readable =
      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read;
  if (Status s = WriteIfDifferent(PreloadHostPath(library), PreloadContent(library), readable,
                                  "the ld.so.preload mgpu containers mount");
      !s.ok())
    return s;
  fs::create_directories(isolation.guard_state_directory, ec);
  if (ec) {
    return Error{"cannot create the guard state directory " + isolation.guard_state_directory + ": " +
                 ec.message()};
  }
  for (const Card& c : cards) {
    if (Status s = PrepareCardState(isolation.guard_state_directory, c); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Status PrepareIsolation(const IsolationConfig& isolation, const std::vector<Card>& cards) {
  switch (isolation.backend) {
    case IsolationBackend::kHamiCore: {
      const fs::perms readable =
          fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read;
      return WriteIfDifferent(PreloadHostPath(isolation.hami_library_path),
                              PreloadContent(isolation.hami_library_path), readable,
                              "the ld.so.preload hami-core containers mount");
    }
    case IsolationBackend::kMgpu:
      return PrepareGuard(isolation, cards);
    case IsolationBackend::kNone:
    case IsolationBackend::kMps:
      break;
  }
  return Status::Ok();
}

}  // namespace mgpu::node
