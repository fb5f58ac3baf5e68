// The guard's shared state of one card: a small file, <stateDir>/<card uuid>/state, mapped by every guarded
// process on the card (all containers) and read by the device plugin's /metrics.
//
// Layout (version kStateVersion, fixed size): a header, kMaxContainers container records, kMaxProcesses
// process slots. Within a version, fields are only ever added in reserved (zeroed) bytes and the header's
// minor_version says which are there; a reader takes any minor version of its layout version and reads a
// field of a later minor as its zero default, so that guards and plugins of different releases share a file.
// All counters are 64-bit and updated with atomic operations; every change of who owns what (claiming a slot
// or a record, reclaiming a dead process's memory, checking a cap) happens under the card lock. Liveness
// never trusts the file: a process holds a POSIX record lock on its slot's byte of the lock range (beyond the
// end of the file) for as long as it lives, the kernel drops it when the process dies, and anyone can test it
// (F_GETLK), whatever pid namespace it runs in. A slot whose lock is free belongs to no one, whatever it
// says. A reader checks magic, version, sizes and every index before using anything.
//
// No exceptions, no logging, no allocation on the hot paths: this code runs inside arbitrary programs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

namespace mgpu::guard {

inline constexpr uint64_t kStateMagic = 0x314452474d47504dULL;  // "MPGMGRD1" read as little-endian
inline constexpr uint32_t kStateVersion = 1;
// 1: ContainerRecord.release_ns and flags, ProcessSlot.waiting; 2: StateHeader.nvml_period_us and
// nvml_last_stamp_us
inline constexpr uint32_t kStateMinorVersion = 2;
inline constexpr uint32_t kMaxContainers = 32;
inline constexpr uint32_t kMaxProcesses = 128;
inline constexpr size_t kTokenBytes = 48;  // MGPU_CONTAINER_TOKEN, NUL-terminated
inline constexpr size_t kUuidBytes = 96;
// Byte offsets of the record locks: the card lock, then one per process slot. Beyond the file's end, so the
// locks never touch data.
inline constexpr off_t kLockBase = 1 << 20;

enum class QosLevel : uint32_t { kOnline = 0, kOffline = 1 };
enum class SharePolicy : uint32_t { kFixedShare = 0, kGuaranteedBurstShare = 1, kNativeBurstShare = 2 };

struct StateHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint32_t container_bytes;
  uint32_t process_bytes;
  uint32_t max_containers;
  uint32_t max_processes;
  uint64_t file_bytes;
  char card_uuid[kUuidBytes];
  uint64_t online_last_launch_ns;  // CLOCK_MONOTONIC of the last kernel launch of an online container
  uint64_t last_refill_ns;         // when the compute budgets were last refilled
  uint64_t nvml_last_seen_us;      // newest NVML utilisation sample consumed
  uint32_t card_util_percent;      // the card's SM utilisation at the last refill
  uint32_t minor_version;          // the newest minor version of the guards that used the file
  uint64_t last_sample_ns;         // when NVML last had new samples
  // Minor version 2:
  uint32_t nvml_period_us;  // NVML's sample period on this card, learned from its stamps; 0: not yet
  uint32_t reserved2;
  uint64_t nvml_last_stamp_us;  // the newest sample's stamp charged; 0: none since the reads started over
  uint8_t reserved[64];
};

struct ContainerRecord {
  uint32_t in_use;
  uint32_t qos;            // QosLevel
  uint32_t policy;         // SharePolicy
  uint32_t share_percent;  // MGPU_CORE_PERCENT, or MGPU_RECLAIMED_CORE_PERCENT offline; 0: none set
  char token[kTokenBytes];
  uint64_t cap_bytes;       // MGPU_MEMORY_MIB
  int64_t credit;           // compute budget, percent x microseconds
  uint64_t launches;        // kernel launches passed
  uint64_t throttled;       // launches that waited for the compute share
  uint64_t held_back;       // offline launches that waited for online work to stop
  uint64_t held_ns;         // time offline launches spent waiting
  uint64_t last_launch_ns;  // CLOCK_MONOTONIC
  uint64_t launches_at_refill;
  uint32_t waiting;       // launches waiting right now
  uint32_t util_percent;  // measured SM utilisation at the last refill
  // Minor version 1:
  uint64_t release_ns;  // offline: how long online work must be idle before its launches go
  uint32_t flags;       // kContainer* bits
  uint32_t reserved1;
  uint8_t reserved[104];
};

// ContainerRecord.flags
inline constexpr uint32_t kContainerShareUnmeasured = 1;  // a process could not measure its use (no NVML)
// The last refill found it idle or, under guaranteed-burst-share, using what the others left: credit beyond
// its 100 ms burst is not kept when it next runs at its share (budget.h). A guard of an earlier release
// ignores it.
inline constexpr uint32_t kContainerSaved = 2;

struct ProcessSlot {
  uint32_t in_use;
  uint32_t container;  // index of its ContainerRecord
  int32_t pid;         // in the process's own pid namespace (matched against NVML's samples)
  uint32_t reserved0;
  uint64_t used_bytes;  // live device memory of the process on this card
  // Minor version 1:
  uint32_t waiting;  // its launches waiting right now (taken back from its container's when it dies)
  uint32_t reserved1;
  uint8_t reserved[32];
};

struct StateFile {
  StateHeader header;
  ContainerRecord containers[kMaxContainers];
  ProcessSlot processes[kMaxProcesses];
};

static_assert(sizeof(StateHeader) == 256);
static_assert(sizeof(ContainerRecord) == 256);
static_assert(sizeof(ProcessSlot) == 64);
inline constexpr size_t kStateFileBytes = sizeof(StateFile);

// "" when `file` (of `size` bytes) is a valid version-kStateVersion state of card `uuid`; else the reason.
const char* CheckState(const StateFile& file, size_t size, const char* uuid);
// A fresh header for card `uuid`, zeroed records and slots.
void InitState(StateFile& file, const char* uuid);

// Record locks on the state file `fd`. The card lock waits; the slot lock does not.
bool LockCard(int fd);
void UnlockCard(int fd);
bool TryLockSlot(int fd, uint32_t slot);
void UnlockSlot(int fd, uint32_t slot);
// True when some other process holds slot `slot`'s lock (a live process owns it).
bool SlotHeld(int fd, uint32_t slot);
// True when some other process holds any lock of the file (some guarded process is on the card).
bool AnyLockHeld(int fd);

// Sum of the used bytes of the slots of container `container` (not checking liveness).
uint64_t ContainerUsedBytes(const StateFile& file, uint32_t container);

// The state of one card as /metrics reports it: only containers with a live process.
struct ContainerSnapshot {
  std::string token;
  QosLevel qos = QosLevel::kOnline;
  SharePolicy policy = SharePolicy::kFixedShare;
  uint32_t share_percent = 0;
  uint64_t cap_bytes = 0;
  uint64_t used_bytes = 0;
  uint32_t processes = 0;
  uint64_t launches = 0;
  uint64_t throttled = 0;
  uint64_t held_back = 0;
  uint64_t held_ns = 0;
  uint32_t waiting = 0;
  uint32_t util_percent = 0;
  int64_t credit = 0;          // its compute budget, percent x microseconds
  uint64_t release_ns = 0;     // offline: its release window (0: not known, a guard of minor version 0)
  bool share_measured = true;  // false: a process of it could not measure its use, so the share is not held
};
struct CardSnapshot {
  std::string uuid;
  uint32_t util_percent = 0;
  std::vector<ContainerSnapshot> containers;
};

// Reads <dir>/<uuid>/state without changing it. False, with the reason in `error`, when the file is absent or
// not a valid state of that card.
bool ReadCardState(const std::string& dir, const std::string& uuid, CardSnapshot& out, std::string& error);

// The state file's path of card `uuid` under `dir`.
std::string StatePath(const std::string& dir, const std::string& uuid);

}  // namespace mgpu::guard
