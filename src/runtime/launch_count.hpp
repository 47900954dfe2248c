// Kernel launches made by the calling thread so far: kiln::graph's per-stage launch counts.
#pragma once

#include <cstdint>

namespace kiln::detail {
std::uint64_t launches_on_this_thread() noexcept;
}  // namespace kiln::detail
