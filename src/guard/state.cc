#include "guard/state.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

namespace mgpu::guard {
namespace {

bool Terminated(const char* text, size_t bytes) { return memchr(text, '\0', bytes) != nullptr; }

bool Lock(int fd, short type, off_t start, off_t length, int command) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = start;
  lock.l_len = length;
  while (fcntl(fd, command, &lock) != 0) {
    if (errno != EINTR || command != F_SETLKW) return false;
  }
  return true;
}

bool Held(int fd, off_t start, off_t length) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = start;
  lock.l_len = length;
  if (fcntl(fd, F_GETLK, &lock) != 0) return false;
  return lock.l_type != F_UNLCK;
}

template <typename T>
T Load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

}  // namespace

const char* CheckState(const StateFile& file, size_t size, const char* uuid) {
  const StateHeader& h = file.header;
  if (size < sizeof(StateHeader)) return "the file is shorter than its header";
  if (h.magic != kStateMagic) return "the file is not an mgpu guard state (bad magic)";
  if (h.version != kStateVersion) return "the file has another layout version";
  if (h.header_bytes != sizeof(StateHeader) || h.container_bytes != sizeof(ContainerRecord) ||
      h.process_bytes != sizeof(ProcessSlot) || h.max_containers != kMaxContainers ||
      h.max_processes != kMaxProcesses || h.file_bytes != kStateFileBytes)
    return "the file's record sizes do not match this version";
  if (size < kStateFileBytes) return "the file is truncated";
  if (!Terminated(h.card_uuid, kUuidBytes) || strcmp(h.card_uuid, uuid) != 0)
    return "the file belongs to another card";
  for (const ContainerRecord& c : file.containers) {
    if (!Load(c.in_use)) continue;
    if (!Terminated(c.token, kTokenBytes) || c.qos > 1 || c.policy > 2 || c.share_percent > 100)
      return "a container record is malformed";
  }
  for (const ProcessSlot& p : file.processes) {
    if (Load(p.in_use) && p.container >= kMaxContainers) return "a process slot names no container";
  }
  return "";
}

void InitState(StateFile& file, const char* uuid) {
  memset(&file, 0, sizeof(file));
  StateHeader& h = file.header;
  h.version = kStateVersion;
  h.header_bytes = sizeof(StateHeader);
  h.container_bytes = sizeof(ContainerRecord);
  h.process_bytes = sizeof(ProcessSlot);
  h.max_containers = kMaxContainers;
  h.max_processes = kMaxProcesses;
  h.file_bytes = kStateFileBytes;
  h.minor_version = kStateMinorVersion;
  strncpy(h.card_uuid, uuid, kUuidBytes - 1);
  std::atomic_ref<uint64_t>(h.magic).store(kStateMagic, std::memory_order_release);  // last: marks it valid
}

bool LockCard(int fd) { return Lock(fd, F_WRLCK, kLockBase, 1, F_SETLKW); }
void UnlockCard(int fd) { Lock(fd, F_UNLCK, kLockBase, 1, F_SETLK); }
bool TryLockSlot(int fd, uint32_t slot) { return Lock(fd, F_WRLCK, kLockBase + 1 + slot, 1, F_SETLK); }
void UnlockSlot(int fd, uint32_t slot) { Lock(fd, F_UNLCK, kLockBase + 1 + slot, 1, F_SETLK); }
bool SlotHeld(int fd, uint32_t slot) { return Held(fd, kLockBase + 1 + slot, 1); }
bool AnyLockHeld(int fd) { return Held(fd, kLockBase, 1 + kMaxProcesses); }

uint64_t ContainerUsedBytes(const StateFile& file, uint32_t container) {
  uint64_t used = 0;
  for (const ProcessSlot& p : file.processes) {
    if (Load(p.in_use) && Load(p.container) == container) used += Load(p.used_bytes);
  }
  return used;
}

std::string StatePath(const std::string& dir, const std::string& uuid) { return dir + "/" + uuid + "/state"; }

bool ReadCardState(const std::string& dir, const std::string& uuid, CardSnapshot& out, std::string& error) {
  const std::string path = StatePath(dir, uuid);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path;
    return false;
  }
  auto file = std::make_unique<StateFile>();
  const ssize_t n = pread(fd, file.get(), sizeof(StateFile), 0);
  const char* why =
      n < 0 ? "the file cannot be read" : CheckState(*file, static_cast<size_t>(n), uuid.c_str());
  if (*why) {
    close(fd);
    error = path + ": " + why;
    return false;
  }
  out = CardSnapshot{uuid, file->header.card_util_percent, {}};
  bool live[kMaxContainers] = {};
  uint32_t processes[kMaxContainers] = {};
  uint64_t used[kMaxContainers] = {};
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& p = file->processes[i];
    if (!p.in_use || !SlotHeld(fd, i)) continue;
    live[p.container] = true;
    ++processes[p.container];
    used[p.container] += p.used_bytes;
  }
  close(fd);
  for (uint32_t i = 0; i < kMaxContainers; ++i) {
    const ContainerRecord& c = file->containers[i];
    if (!c.in_use || !live[i]) continue;
    // Fields of a later minor version than the file's are read as their zero default.
    const bool minor1 = file->header.minor_version >= 1;
    out.containers.push_back({c.token, static_cast<QosLevel>(c.qos), static_cast<SharePolicy>(c.policy),
                              c.share_percent, c.cap_bytes, used[i], processes[i], c.launches, c.throttled,
                              c.held_back, c.held_ns, c.waiting, c.util_percent, c.credit,
                              minor1 ? c.release_ns : 0, !(minor1 && (c.flags & kContainerShareUnmeasured))});
  }
  return true;
}

}  // namespace mgpu::guard
