// Which host memory is pinned: every host_alloc (kiln::pinned_buffer, staging buffers) is noted
// here, so that copies can DMA straight from or into it instead of going through staging.
#pragma once

#include <cstdint>

namespace kiln::detail {

struct device_impl;

void note_pinned(const device_impl* dev, const void* p, std::uint64_t bytes);
void forget_pinned(const void* p) noexcept;
// The device whose host_alloc returned the allocation holding all of [p, p + bytes); null when
// no single pinned allocation holds it.
const device_impl* pinned_owner(const void* p, std::uint64_t bytes);

}  // namespace kiln::detail
