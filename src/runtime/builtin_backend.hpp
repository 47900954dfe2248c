// Backends linked into libkiln (the CPU backend) register themselves here, so the registry
// holds no list of them. A namespace-scope object in the backend does it:
//
//   const kiln::detail::builtin_backend registration{entry};
//
// libkiln is a shared library, so every object in it is linked and its registrations run
// when it loads, before any caller can reach the registry.
#pragma once

#include <span>

#include "backend_abi.h"

namespace kiln::detail {

struct builtin_backend {
  explicit builtin_backend(kiln_backend_entry_fn entry) noexcept;
};

// In registration order.
std::span<const kiln_backend_entry_fn> builtin_backends() noexcept;

}  // namespace kiln::detail
