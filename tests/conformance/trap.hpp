// A real device fault for the device-loss tests: a kernel that stores through a wild address.
// Only CUDA survives one (the context is poisoned, the process lives); elsewhere it would kill
// the process, so callers run it on CUDA devices only.
#pragma once

#include <kiln/kiln.hpp>

#include <string>

namespace conformance {

// Launches the faulting kernel on dev and waits. Returns the error Kiln raised (empty when
// none was: the device did not fault).
std::string trap(const kiln::device& dev);

}  // namespace conformance
