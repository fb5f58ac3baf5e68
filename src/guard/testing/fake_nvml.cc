// A fake libnvidia-ml.so.1 for the guard's tests: per-process SM utilisation as the test sets it in the file
// FAKE_NVML_UTIL_FILE, one "<pid> <percent>" line per process, each reported as a fresh sample at every call.
// FAKE_NVML_BACKLOG=N: a call that asks for every sample (lastSeenTimeStamp 0) finds N of them waiting, as the
// real driver keeps a backlog, and gets NVML_ERROR_INSUFFICIENT_SIZE unless its buffer holds N.
#include <sys/time.h>

#include <cstdio>
#include <cstdlib>

#include "guard/cuda_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char*, nvmlDevice_t* device) {
  static int card;
  *device = reinterpret_cast<nvmlDevice_t>(&card);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned int* count, unsigned long long since) {
  const char* backlog = getenv("FAKE_NVML_BACKLOG");
  const unsigned waiting = backlog ? static_cast<unsigned>(atoi(backlog)) : 0;
  if (since == 0 && waiting > *count) {
    *count = waiting;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  nvmlProcessUtilizationSample_t read[64];
  unsigned n = 0;
  const char* path = getenv("FAKE_NVML_UTIL_FILE");
  if (FILE* f = path ? fopen(path, "r") : nullptr) {
    unsigned pid = 0, util = 0;
    while (n < 64 && fscanf(f, "%u %u", &pid, &util) == 2) read[n++] = {pid, 0, util, 0, 0, 0};
    fclose(f);
  }
  if (n == 0) return NVML_ERROR_NOT_FOUND;
  if (!samples || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  timeval now{};
  gettimeofday(&now, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    samples[i] = read[i];
    samples[i].timeStamp = static_cast<unsigned long long>(now.tv_sec) * 1000000ULL + now.tv_usec;
  }
  *count = n;
  return NVML_SUCCESS;
}
