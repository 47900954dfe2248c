// How query results reach host memory (src/query/host_output.cpp): chunked device-to-host DMAs
// through the device's pinned staging buffers, drained into the destination by several threads
// while the next chunks cross; a pinned destination (kiln::pinned_buffer) takes one DMA.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/buffer.hpp"

namespace kiln::detail::q {

// Copies bytes [offset, offset + bytes) of src into host memory, after all work queued on src.
// `destination(ctx)` is called once, on this thread, once the first chunks are already crossing
// (the caller's allocation of the result overlaps them); it returns where the bytes go.
void read_to_host(memory_impl& src, std::uint64_t offset, std::uint64_t bytes,
                  void* (*destination)(void* ctx), void* ctx);
// The same into memory that exists already: one DMA when it is pinned for src's device.
void copy_to_host(memory_impl& src, std::uint64_t offset, void* dst, std::uint64_t bytes);

// The first n elements of src as a std::vector (to_vector()).
template <class T>
std::vector<T> read_vector(const std::shared_ptr<memory_impl>& src, std::uint64_t n) {
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is not contiguous
    return buffer_view<const bool>(src, 0, n).to_vector();
  } else {
    struct target {
      std::vector<T> v;
      std::uint64_t n;
    } t{{}, n};
    read_to_host(
        *src, 0, n * sizeof(T),
        [](void* p) -> void* {
          auto& x = *static_cast<target*>(p);
          x.v.resize(x.n);  // value-initialises (one thread): runs while the first chunks cross
          return x.v.data();
        },
        &t);
    return std::move(t.v);
  }
}

}  // namespace kiln::detail::q
