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
  if (record < 0) {
    for (uint32_t i = 0; i < kMaxContainers && record < 0; ++i) {
      if (!A(c.file->containers[i].in_use).load() || !ContainerLive(c, i)) record = static_cast<int>(i);
    }
    if (record < 0) return false;
    ContainerRecord& r = c.file->containers[record];
    A(r.in_use).store(0);
    memset(&r, 0, sizeof(r));
    strcpy(r.token, s.token);
    r.credit = StartingCredit(s.share_percent);
    A(r.in_use).store(1);
  }
  ContainerRecord& r = c.file->containers[record];
  r.qos = static_cast<uint32_t>(s.qos);
  r.policy = static_cast<uint32_t>(s.policy);
  r.share_percent = s.share_percent;
  A(r.cap_bytes).store(s.cap_bytes);
  ProcessSlot& p = c.file->processes[slot];
  A(p.used_bytes).store(0);
  p.container = static_cast<uint32_t>(record);
  p.pid = static_cast<int32_t>(getpid());
  A(p.in_use).store(1);
  c.slot = slot;
  c.container = static_cast<uint32_t>(record);
  return true;
}

void StepAside(CardHandle& c, const char* uuid, const char* why) {
  Log(LogClass::kCard, true, "card=%s: %s, so the guard steps aside on this card", uuid, why);
  c.status.store(-1);
}

// Opens (creating or repairing when no one uses it) and maps the card's state, then registers the process.
// Under g_mutex.
void Attach(int index, const Settings& s) {
  CardHandle& c = g_cards[index];
  const char* uuid = s.cards[index];
  if (c.fd < 0) {
    char path[sizeof(s.state_dir) + kUuidBytes + 16];
    snprintf(path, sizeof(path), "%s/%s", s.state_dir, uuid);
    mkdir(path, 0777);
    snprintf(path, sizeof(path), "%s/%s/state", s.state_dir, uuid);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return StepAside(c, uuid, "the state file cannot be opened");
    fchmod(fd, 0666);
    c.fd = fd;
  }
  CardLock lock(c);
  if (!c.file) {
    struct stat st {};
    if (fstat(c.fd, &st) != 0) return StepAside(c, uuid, "the state file cannot be read");
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
        return StepAside(c, uuid, why);
      }
      Log(LogClass::kCard, true, "card=%s: %s and no process uses it, so the guard starts it afresh", uuid,
          why);
    }
    if (fresh || *why) {
      if (ftruncate(c.fd, static_cast<off_t>(kStateFileBytes)) != 0 || (!file && !(file = map()))) {
        if (file) munmap(file, kStateFileBytes);
        return StepAside(c, uuid, "the state file cannot be sized or mapped");
      }
      InitState(*file, uuid);
    }
    c.file = file;
  }
  if (!Register(c, s)) return StepAside(c, uuid, "the state file has no free process or container slot");
  c.status.store(1);
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

}  // namespace mgpu::guard
