// Each visible card's shared state, as this process sees it: the state file opened (created or repaired when
// no one uses it) and mapped at first use, a process slot and the container's record claimed, the slots of
// dead processes reclaimed; and which visible card a device ordinal is.
#include <fcntl.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "guard/budget.h"
#include "guard/guard_internal.h"

namespace mgpu::guard {

CardHandle g_cards[kMaxCards];
std::mutex* g_mutex = new std::mutex;

namespace {

// Device ordinal -> 2 + visible card index; 1: not an mgpu card; 0: not looked up yet.
std::atomic<int> g_ordinal_card[kMaxOrdinals];

bool ContainerLive(CardHandle& c, uint32_t index) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& p = c.file->processes[i];
    if (A(const_cast<uint32_t&>(p.in_use)).load() && p.container == index &&
        (static_cast<int>(i) == c.slot || SlotHeld(c.fd, i)))
      return true;
  }
  return false;
}

// Takes record `record` for the container (afresh unless it is already the container's) and process slot
// `slot` for this process. Under g_mutex and the card lock.
void Claim(CardHandle& c, const Settings& s, int record, int slot, bool afresh) {
  ContainerRecord& r = c.file->containers[record];
  if (afresh) {
    A(r.in_use).store(0);
    memset(&r, 0, sizeof(r));
    strcpy(r.token, s.token);
    r.credit = StartingCredit(s.share_percent);
    A(r.in_use).store(1);
  }
  r.qos = static_cast<uint32_t>(s.qos);
  r.policy = static_cast<uint32_t>(s.policy);
  r.share_percent = s.share_percent;
  r.release_ns = s.qos == QosLevel::kOffline ? s.release_ns : 0;
  A(r.cap_bytes).store(s.cap_bytes);
  ProcessSlot& p = c.file->processes[slot];
  A(p.used_bytes).store(0);
  A(p.waiting).store(0);
  p.container = static_cast<uint32_t>(record);
  p.pid = static_cast<int32_t>(getpid());
  A(p.in_use).store(1);
  c.slot = slot;
  c.container = static_cast<uint32_t>(record);
}

// Claims a process slot and the container's record. Under g_mutex and the card lock.
bool Register(CardHandle& c, const Settings& s) {
  ReclaimDead(c);
  int slot = -1;
  for (uint32_t i = 0; i < kMaxProcesses && slot < 0; ++i) {
    if (TryLockSlot(c.fd, i)) slot = static_cast<int>(i);
  }
  if (slot < 0) return false;
  int record = -1;
  for (uint32_t i = 0; i < kMaxContainers && record < 0; ++i) {
    ContainerRecord& r = c.file->containers[i];
    if (A(r.in_use).load() && strncmp(r.token, s.token, kTokenBytes) == 0) record = static_cast<int>(i);
  }
  const bool afresh = record < 0;
  for (uint32_t i = 0; i < kMaxContainers && record < 0; ++i) {
    if (!A(c.file->containers[i].in_use).load() || !ContainerLive(c, i)) record = static_cast<int>(i);
  }
  if (record < 0) {
    UnlockSlot(c.fd, static_cast<uint32_t>(slot));
    return false;
  }
  Claim(c, s, record, slot, afresh);
  return true;
}

void StepAside(CardHandle& c, const char* uuid, const char* why) {
  Log(LogClass::kCard, true, "card=%s: %s, so the guard steps aside on this card", uuid, why);
  c.status.store(-1);
}

// The shared state cannot be used: the process keeps the container's cap and share on a state of its own
// (what it alone allocates and uses), the best enforcement left. Under g_mutex.
void GoPrivate(CardHandle& c, const Settings& s, int index, const char* why) {
  const char* uuid = s.cards[index];
  void* m = mmap(nullptr, kStateFileBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return StepAside(c, uuid, why);
  Log(LogClass::kCard, true,
      "card=%s: %s, so this process holds itself alone to the container's cap and share on this card", uuid,
      why);
  if (c.file) munmap(c.file, kStateFileBytes);
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;  // no locks: no other process shares this state
  c.file = static_cast<StateFile*>(m);
  c.private_state = true;
  InitState(*c.file, uuid);
  Claim(c, s, 0, 0, true);
  c.status.store(1);
}

const char* AttachShared(CardHandle& c, const Settings& s, int index);

// Opens (creating or repairing when no one uses it) and maps the card's state, then registers the process;
// when that cannot be done, a state of the process's own. Under g_mutex.
void Attach(int index, const Settings& s) {
  CardHandle& c = g_cards[index];
  const char* uuid = s.cards[index];
  if (c.private_state) {  // a fork's child of a process on a state of its own
    Claim(c, s, 0, 0, false);
    c.status.store(1);
    return;
  }
  if (c.fd < 0) {
    char path[sizeof(s.state_dir) + kUuidBytes + 16];
    snprintf(path, sizeof(path), "%s/%s", s.state_dir, uuid);
    mkdir(path, 0777);
    snprintf(path, sizeof(path), "%s/%s/state", s.state_dir, uuid);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return GoPrivate(c, s, index, "the state file cannot be opened");
    fchmod(fd, 0666);
    c.fd = fd;
  }
  const char* failed = AttachShared(c, s, index);
  if (*failed) GoPrivate(c, s, index, failed);
}

// Attach's part under the card lock: "" when registered, else why the shared state cannot be used.
const char* AttachShared(CardHandle& c, const Settings& s, int index) {
  const char* uuid = s.cards[index];
  CardLock lock(c);
  if (!c.file) {
    struct stat st {};
    if (fstat(c.fd, &st) != 0) return "the state file cannot be read";
    const size_t size = static_cast<size_t>(st.st_size);
    const bool fresh = size == 0;
    const auto map = [&] {
      void* m = mmap(nullptr, kStateFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd, 0);
      return m == MAP_FAILED ? nullptr : static_cast<StateFile*>(m);
    };
    // Mapped only when the file holds a whole state: a page past its end would kill the program on access.
    StateFile* file = nullptr;
    const char* why = "";
    if (!fresh && size < kStateFileBytes) {
      why = "the state file is shorter than a state";
    } else if (!fresh) {
      file = map();
      why = file ? CheckState(*file, size, uuid) : "the state file cannot be mapped";
    }
    if (*why) {
      if (AnyLockHeld(c.fd)) {
        if (file) munmap(file, kStateFileBytes);
        return "the state file is not valid while other processes use it";
      }
      Log(LogClass::kRepair, true, "card=%s: %s and no process uses it, so the guard starts it afresh", uuid,
          why);
    }
    if (fresh || *why) {
      if (ftruncate(c.fd, static_cast<off_t>(kStateFileBytes)) != 0 || (!file && !(file = map()))) {
        if (file) munmap(file, kStateFileBytes);
        return "the state file cannot be sized or mapped";
      }
      InitState(*file, uuid);
    }
    c.file = file;
  }
  if (c.file->header.minor_version < kStateMinorVersion) c.file->header.minor_version = kStateMinorVersion;
  if (!Register(c, s)) return "the state file has no free process or container slot";
  c.status.store(1);
  return "";
}

void FormatUuid(const CUuuid& u, char* out) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  snprintf(out, kUuidBytes, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

}  // namespace

void ReclaimDead(CardHandle& c) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& p = c.file->processes[i];
    if (static_cast<int>(i) == c.slot || !A(p.in_use).load() || SlotHeld(c.fd, i)) continue;
    // A process killed while its launches waited leaves them counted: its container would seem to want the
    // card for ever.
    if (const uint32_t waited = A(p.waiting).exchange(0); waited > 0 && p.container < kMaxContainers) {
      auto waiting = A(c.file->containers[p.container].waiting);
      uint32_t have = waiting.load();
      while (!waiting.compare_exchange_weak(have, have > waited ? have - waited : 0)) {
      }
    }
    A(p.used_bytes).store(0);
    A(p.in_use).store(0);
  }
}

CardHandle* AttachCard(int index) {
  CardHandle& c = g_cards[index];
  int status = c.status.load(std::memory_order_acquire);
  if (status == 0) {
    std::lock_guard<std::mutex> hold(*g_mutex);
    if (c.status.load() == 0) Attach(index, g_settings);
    status = c.status.load();
  }
  return status == 1 ? &c : nullptr;
}

int CardOfDevice(CUdevice device) {
  if (!GetSettings().active) return -1;
  LoadDriver();
  if (device < 0) {
    if (!g_ctx_get_device || g_ctx_get_device(&device) != CUDA_SUCCESS) return -1;
  }
  if (device < 0 || device >= kMaxOrdinals) return -1;
  const int known = g_ordinal_card[device].load(std::memory_order_relaxed);
  if (known != 0) return known - 2;
  int card = -1;
  CUuuid uuid{};
  if (g_device_get_uuid && g_device_get_uuid(&uuid, device) == CUDA_SUCCESS) {
    char text[kUuidBytes];
    FormatUuid(uuid, text);
    for (int i = 0; i < g_settings.card_count; ++i) {
      if (strcasecmp(text, g_settings.cards[i]) == 0) card = i;
    }
  }
  g_ordinal_card[device].store(card + 2, std::memory_order_relaxed);
  return card;
}

void ForgetCardsInChild() {
  g_mutex = new (std::nothrow) std::mutex;
  for (CardHandle& c : g_cards) {
    c.slot = -1;
    if (c.status.load() == 1) c.status.store(0);
  }
}

bool ViewSlice(int index, SliceView& v) {
  const Settings& s = GetSettings();
  if (!s.active || index < 0 || index >= s.card_count) return false;
  v = SliceView{};
  v.cap_bytes = s.cap_bytes;
  std::lock_guard<std::mutex> hold(*g_mutex);
  CardHandle& c = g_cards[index];
  StateFile* file = nullptr;
  int fd = -1;
  uint32_t container = kMaxContainers;
  static StateFile* copy = new (std::nothrow) StateFile;  // under g_mutex; only NVML's callers pay for it
  if (!copy) return false;
  if (c.status.load() == 1) {
    CardLock lock(c);
    ReclaimDead(c);
    *copy = *c.file;
    file = copy;
    container = c.container;
  } else {
    // Not attached (nvidia-smi, say): read the container's part without joining it.
    char path[sizeof(s.state_dir) + kUuidBytes + 16];
    snprintf(path, sizeof(path), "%s/%s/state", s.state_dir, s.cards[index]);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;  // no state: no process of the container uses the card
    const ssize_t n = pread(fd, copy, sizeof(StateFile), 0);
    if (n < 0 || *CheckState(*copy, static_cast<size_t>(n), s.cards[index])) {
      close(fd);
      return true;
    }
    file = copy;
    for (uint32_t i = 0; i < kMaxContainers; ++i) {
      if (file->containers[i].in_use && strncmp(file->containers[i].token, s.token, kTokenBytes) == 0)
        container = i;
    }
  }
  if (container < kMaxContainers) {
    for (uint32_t i = 0; i < kMaxProcesses; ++i) {
      const ProcessSlot& p = file->processes[i];
      if (!p.in_use || p.container != container) continue;
      if (fd >= 0 && !SlotHeld(fd, i)) continue;  // dead
      v.used_bytes += p.used_bytes;
      v.pid[v.processes] = p.pid;
      v.bytes[v.processes++] = p.used_bytes;
    }
    v.util_percent = file->containers[container].util_percent;
    v.util_known = file->header.last_sample_ns != 0 && file->header.last_sample_ns + 1'000'000'000 > NowNs();
  }
  if (fd >= 0) close(fd);
  return true;
}

}  // namespace mgpu::guard
