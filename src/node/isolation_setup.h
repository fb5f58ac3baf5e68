// What the node must hold before containers are handed the isolation backend's mounts (DESIGN §6), by
// Allocate or by a claim's CDI spec:
//   hami-core: the ld.so.preload beside libvgpu.so;
//   mgpu:      libmgpu-guard.so at isolation.guardLibraryPath (installed from
//              isolation.guardLibrarySource, the copy in the daemon's image, when that differs), the
//              ld.so.preload beside it, and one state directory and state file per card under
//              isolation.guardStateDirectory, writable by every container on the card (a state file no
//              process uses that is not a valid state is started afresh).
// Either mode's daemon calls it once at start; an error (one sentence) stops it, since containers given
// mounts of missing files would not start.
#pragma once

#include <vector>

#include "common/config.h"
#include "common/model.h"
#include "common/result.h"

namespace mgpu::node {

Status PrepareIsolation(const IsolationConfig& isolation, const std::vector<Card>& cards);

}  // namespace mgpu::node
