#include "node/gpu_backend.h"

namespace mgpu::node {

bool IsCriticalXid(uint64_t xid) {
  switch (xid) {
    case 13:   // graphics engine exception: the application's fault
    case 31:   // GPU memory page fault: usually the application
    case 43:   // GPU stopped processing: the application
    case 45:   // preemptive cleanup after another error
    case 68:   // video processor exception
    case 109:  // context switch timeout: the application
      return false;
    default:
      return true;
  }
}

}  // namespace mgpu::node
