#include "node/nvml_backend.h"

#include <dlfcn.h>

namespace mgpu::node {
namespace {

// The few NVML declarations used (NVML's C ABI, stable across driver releases).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
constexpr nvmlReturn_t kNvmlErrorTimeout = 10;
using nvmlDevice_t = void*;
using nvmlEventSet_t = void*;
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8;
constexpr unsigned kNvmlUuidBuffer = 96;
constexpr unsigned kNvmlNameBuffer = 96;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

}  // namespace

struct NvmlBackend::Api {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*DeviceGetCount)(unsigned int*);
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*);
  nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t*);
  nvmlReturn_t (*EventSetFree)(nvmlEventSet_t);
  nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
  nvmlReturn_t (*EventSetWait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);

  std::string Describe(nvmlReturn_t r) const {
    const char* s = ErrorString ? ErrorString(r) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(r);
  }
};

namespace {

template <typename F>
bool Resolve(void* handle, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (!out) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return out != nullptr;
}

}  // namespace

Result<std::unique_ptr<NvmlBackend>> NvmlBackend::Open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return Error{"cannot load " + library + " (" + (why ? why : "unknown error") +
                 "): the NVIDIA driver is not installed or not visible to the plugin; mount the driver's "
                 "libraries or set devicePlugin.gpuBackend: static"};
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  Resolve(handle, "nvmlInit_v2", api->Init, missing);
  Resolve(handle, "nvmlShutdown", api->Shutdown, missing);
  Resolve(handle, "nvmlErrorString", api->ErrorString, missing);
  Resolve(handle, "nvmlDeviceGetCount_v2", api->DeviceGetCount, missing);
  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", api->DeviceGetHandleByIndex, missing);
  Resolve(handle, "nvmlDeviceGetUUID", api->DeviceGetUUID, missing);
  Resolve(handle, "nvmlDeviceGetName", api->DeviceGetName, missing);
  Resolve(handle, "nvmlDeviceGetMemoryInfo", api->DeviceGetMemoryInfo, missing);
  Resolve(handle, "nvmlDeviceGetMinorNumber", api->DeviceGetMinorNumber, missing);
  Resolve(handle, "nvmlDeviceGetPciInfo_v3", api->DeviceGetPciInfo, missing);
  Resolve(handle, "nvmlEventSetCreate", api->EventSetCreate, missing);
  Resolve(handle, "nvmlEventSetFree", api->EventSetFree, missing);
  Resolve(handle, "nvmlDeviceRegisterEvents", api->DeviceRegisterEvents, missing);
  Resolve(handle, "nvmlEventSetWait_v2", api->EventSetWait, missing);
  if (!missing.empty()) {
    dlclose(handle);
    return Error{library + " lacks " + missing + ": the NVIDIA driver is too old"};
  }
  if (nvmlReturn_t r = api->Init(); r != kNvmlSuccess) {
    const std::string why = api->Describe(r);
    dlclose(handle);
    return Error{"NVML failed to initialise (" + why + "): is the NVIDIA driver loaded?"};
  }
  return std::unique_ptr<NvmlBackend>(new NvmlBackend(handle, std::move(api)));
}

NvmlBackend::NvmlBackend(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

NvmlBackend::~NvmlBackend() {
  if (event_set_) api_->EventSetFree(event_set_);
  api_->Shutdown();
  dlclose(handle_);
}

Result<std::vector<GpuInfo>> NvmlBackend::Discover() {
  unsigned int count = 0;
  if (nvmlReturn_t r = api_->DeviceGetCount(&count); r != kNvmlSuccess)
    return Error{"NVML cannot count the cards: " + api_->Describe(r)};
  std::vector<GpuInfo> out;
  uuid_by_device_.clear();
  for (unsigned int i = 0; i < count; ++i) {
    const std::string where = "NVML card " + std::to_string(i) + ": ";
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t r = api_->DeviceGetHandleByIndex(i, &device); r != kNvmlSuccess)
      return Error{where + "no handle: " + api_->Describe(r)};
    char uuid[kNvmlUuidBuffer] = {};
    if (nvmlReturn_t r = api_->DeviceGetUUID(device, uuid, sizeof uuid); r != kNvmlSuccess)
      return Error{where + "no UUID: " + api_->Describe(r)};
    char name[kNvmlNameBuffer] = {};
    if (nvmlReturn_t r = api_->DeviceGetName(device, name, sizeof name); r != kNvmlSuccess)
      return Error{where + "no name: " + api_->Describe(r)};
    nvmlMemory_t memory{};
    if (nvmlReturn_t r = api_->DeviceGetMemoryInfo(device, &memory); r != kNvmlSuccess)
      return Error{where + "no memory size: " + api_->Describe(r)};
    GpuInfo info;
    info.card = Card{static_cast<int>(i), uuid, name, static_cast<int64_t>(memory.total >> 20), true};
    unsigned int minor = 0;
    if (api_->DeviceGetMinorNumber(device, &minor) == kNvmlSuccess) info.minor = static_cast<int>(minor);
    nvmlPciInfo_t pci{};
    if (api_->DeviceGetPciInfo(device, &pci) == kNvmlSuccess) info.pci_bus_id = pci.busId;
    uuid_by_device_[device] = info.card.uuid;
    out.push_back(std::move(info));
  }
  return out;
}

Status NvmlBackend::WatchEvents() {
  if (event_set_) return Status::Ok();
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t r = api_->EventSetCreate(&set); r != kNvmlSuccess)
    return Error{"NVML cannot create an event set: " + api_->Describe(r)};
  event_set_ = set;
  if (uuid_by_device_.empty()) {
    if (auto cards = Discover(); !cards.ok()) return cards.error();
  }
  for (const auto& [device, uuid] : uuid_by_device_) {
    const nvmlReturn_t r = api_->DeviceRegisterEvents(device, kNvmlEventTypeXidCriticalError, set);
    // A card that cannot report XIDs is still usable; one whose registration fails otherwise is suspect.
    if (r != kNvmlSuccess && r != kNvmlErrorNotSupported) {
      pending_.push_back(HealthEvent{uuid, false, "cannot watch XID events: " + api_->Describe(r)});
    }
  }
  return Status::Ok();
}

Result<std::optional<HealthEvent>> NvmlBackend::WaitHealthEvent(std::chrono::milliseconds timeout) {
  if (Status s = WatchEvents(); !s.ok()) return Error{s.message()};
  if (!pending_.empty()) {
    HealthEvent e = std::move(pending_.front());
    pending_.pop_front();
    return std::optional<HealthEvent>(std::move(e));
  }
  nvmlEventData_t data{};
  const nvmlReturn_t r = api_->EventSetWait(event_set_, &data, static_cast<unsigned int>(timeout.count()));
  if (r == kNvmlErrorTimeout) return std::optional<HealthEvent>();
  if (r != kNvmlSuccess) return Error{"NVML event wait failed: " + api_->Describe(r)};
  if (data.eventType != kNvmlEventTypeXidCriticalError || !IsCriticalXid(data.eventData))
    return std::optional<HealthEvent>();
  HealthEvent e;
  auto it = uuid_by_device_.find(data.device);
  if (it != uuid_by_device_.end()) e.card_uuid = it->second;
  e.healthy = false;
  e.reason = "XID " + std::to_string(data.eventData);
  return std::optional<HealthEvent>(std::move(e));
}

}  // namespace mgpu::node
