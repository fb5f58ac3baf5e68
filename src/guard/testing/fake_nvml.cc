// A fake libnvidia-ml.so.1 for the guard's tests, one device per UUID of FAKE_CUDA_UUIDS (as the fake
// driver):
//   - per-process SM utilisation as the test sets it in the file FAKE_NVML_UTIL_FILE, one "<pid> <percent>"
//     line per process, each reported as a fresh sample (stamped now) at every call newer than the caller's
//     last seen; FAKE_NVML_BACKLOG=N: a call that asks for every sample (lastSeenTimeStamp 0) finds N
//     waiting, as the real driver keeps a backlog, and gets NVML_ERROR_INSUFFICIENT_SIZE unless its buffer
//     holds N; FAKE_NVML_CLOCK_OFFSET_S: samples are stamped this many seconds off (a realtime clock set
//     back: < 0); FAKE_NVML_DELAY_US: each such call takes this long (a real driver's takes milliseconds);
//     FAKE_NVML_READ_LOG: a file each such call appends "read main" or "read thread" to (whether the
//     process's main thread made it);
//   - FAKE_NVML_LOST: a file whose existence makes every device call answer NVML_ERROR_GPU_IS_LOST;
//   - the card as a whole: FAKE_CUDA_TOTAL_MIB of memory of which FAKE_NVML_USED_MIB used, the processes of
//     FAKE_NVML_PROCESSES ("<pid>:<MiB>,..."; host pids the container cannot see, listed as compute
//     processes by every process-list call, nvmlDeviceGetRunningProcessDetailList's modes included),
//     FAKE_NVML_GPU_UTIL percent.
#include <fcntl.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "guard/cuda_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::vector<std::string> Uuids() {
  std::vector<std::string> out;
  const char* list = getenv("FAKE_CUDA_UUIDS");
  std::string all = list ? list : "";
  for (size_t start = 0; start < all.size();) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    out.push_back(all.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int g_devices[16];
nvmlDevice_t Handle(unsigned index) { return reinterpret_cast<nvmlDevice_t>(&g_devices[index]); }
bool Valid(nvmlDevice_t d) {
  const auto* p = reinterpret_cast<int*>(d);
  return p >= g_devices && p < g_devices + Uuids().size();
}
bool Lost() {
  const char* lost = getenv("FAKE_NVML_LOST");
  return lost && access(lost, F_OK) == 0;
}
unsigned long long Env(const char* name, unsigned long long otherwise) {
  const char* v = getenv(name);
  return v ? strtoull(v, nullptr, 10) : otherwise;
}

struct Process {
  unsigned pid;
  unsigned long long bytes;
};
std::vector<Process> Processes() {
  std::vector<Process> out;
  const char* list = getenv("FAKE_NVML_PROCESSES");
  for (const char* p = list; p && *p;) {
    unsigned pid = 0;
    unsigned long long mib = 0;
    if (sscanf(p, "%u:%llu", &pid, &mib) != 2) break;
    out.push_back({pid, mib << 20});
    p = strchr(p, ',');
    if (p) ++p;
  }
  return out;
}

template <typename Info>
nvmlReturn_t List(nvmlDevice_t device, unsigned int* count, Info* infos) {
  if (!Valid(device) || !count) return NVML_ERROR_INVALID_ARGUMENT;
  if (Lost()) return NVML_ERROR_GPU_IS_LOST;
  const auto all = Processes();
  if (*count < all.size()) {
    *count = static_cast<unsigned>(all.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    Info info{};
    info.pid = all[i].pid;
    info.usedGpuMemory = all[i].bytes;
    infos[i] = info;
  }
  *count = static_cast<unsigned>(all.size());
  return NVML_SUCCESS;
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }
FAKE_EXPORT nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = static_cast<unsigned>(Uuids().size());
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= Uuids().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = Handle(index);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  const auto all = Uuids();
  for (size_t i = 0; i < all.size(); ++i) {
    if (strcasecmp(all[i].c_str(), uuid) == 0) {
      *device = Handle(static_cast<unsigned>(i));
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (!Valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  snprintf(uuid, length, "%s", Uuids()[reinterpret_cast<int*>(device) - g_devices].c_str());
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!Valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (Lost()) return NVML_ERROR_GPU_IS_LOST;
  memory->total = Env("FAKE_CUDA_TOTAL_MIB", 81920) << 20;
  memory->used = Env("FAKE_NVML_USED_MIB", 0) << 20;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  nvmlMemory_t m{};
  const nvmlReturn_t rc = nvmlDeviceGetMemoryInfo(device, &m);
  if (rc != NVML_SUCCESS) return rc;
  memory->reserved = 400ULL << 20;
  memory->total = m.total;
  memory->used = m.used;
  memory->free = m.free - memory->reserved;
  return NVML_SUCCESS;
}

#define FAKE_LIST(name, Info) \
  FAKE_EXPORT nvmlReturn_t name(nvmlDevice_t d, unsigned int* n, Info* i) { return List(d, n, i); }
FAKE_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
FAKE_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
FAKE_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t)
FAKE_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
FAKE_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
FAKE_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t)
FAKE_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
FAKE_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
FAKE_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_v2_t)
#undef FAKE_LIST

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                               nvmlProcessDetailList_t* list) {
  if (!list || list->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned n = list->numProcArrayEntries;
  const nvmlReturn_t rc = List(device, &n, list->procArray);
  list->numProcArrayEntries = n;
  return rc;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (!Valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (Lost()) return NVML_ERROR_GPU_IS_LOST;
  utilization->gpu = static_cast<unsigned>(Env("FAKE_NVML_GPU_UTIL", 0));
  utilization->memory = 7;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned int* count, unsigned long long since) {
  if (!Valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (const char* log = getenv("FAKE_NVML_READ_LOG")) {
    const int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    const bool main_thread = syscall(SYS_gettid) == getpid();
    const char* line = main_thread ? "read main\n" : "read thread\n";
    if (fd >= 0 && write(fd, line, strlen(line)) < 0) perror("fake nvml: read log");
    if (fd >= 0) close(fd);
  }
  if (const unsigned long long delay = Env("FAKE_NVML_DELAY_US", 0)) usleep(static_cast<useconds_t>(delay));
  if (Lost()) return NVML_ERROR_GPU_IS_LOST;
  const char* backlog = getenv("FAKE_NVML_BACKLOG");
  const unsigned waiting = backlog ? static_cast<unsigned>(atoi(backlog)) : 0;
  if (since == 0 && waiting > *count) {
    *count = waiting;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  timeval now{};
  gettimeofday(&now, nullptr);
  const long long offset_us = static_cast<long long>(
      atof(getenv("FAKE_NVML_CLOCK_OFFSET_S") ? getenv("FAKE_NVML_CLOCK_OFFSET_S") : "0") * 1e6);
  const unsigned long long stamp = static_cast<unsigned long long>(
      static_cast<long long>(now.tv_sec) * 1000000LL + now.tv_usec + offset_us);
  if (stamp <= since) return NVML_ERROR_NOT_FOUND;  // nothing newer than what the caller saw
  nvmlProcessUtilizationSample_t read[64];
  unsigned n = 0;
  const char* path = getenv("FAKE_NVML_UTIL_FILE");
  if (FILE* f = path ? fopen(path, "r") : nullptr) {
    unsigned pid = 0, util = 0;
    while (n < 64 && fscanf(f, "%u %u", &pid, &util) == 2) read[n++] = {pid, stamp, util, 0, 0, 0};
    fclose(f);
  }
  if (n == 0) return NVML_ERROR_NOT_FOUND;
  if (!samples || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; ++i) samples[i] = read[i];
  *count = n;
  return NVML_SUCCESS;
}
