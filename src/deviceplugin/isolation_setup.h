// What the node must hold before Allocate hands containers the isolation backend's mounts (DESIGN §6):
//   hami-core: the ld.so.preload beside libvgpu.so;
//   mgpu:      libmgpu-guard.so at isolation.guardLibraryPath (installed from isolation.guardLibrarySource,
//   the
//              copy in the plugin's image, when that differs), the ld.so.preload beside it, and one state
//              directory and state file per card under isolation.guardStateDirectory, writable by every
//              container on the card (a state file no process uses that is not a valid state is started
//              afresh).
// The daemon calls it once at start; an error (one sentence) stops the plugin, since containers given
// mounts of missing files would not start.
#pragma once

#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu::dp {

Status PrepareIsolation(const IsolationConfig& isolation, const std::vector<Card>& cards);

}  // namespace mgpu::dp
