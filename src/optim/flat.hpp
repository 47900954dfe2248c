// Reading and writing ranges of a group's flat buffers (construction, gradients replaced by
// set_grad, state dicts).
#pragma once

#include <cstdint>

#include "optim/optim_impl.hpp"

namespace kiln::optim::detail {

// Every function takes the element type t of the buffer (g.dtype for params and grads, g.math
// for the master and the state) and works on the group's device's default queue.

// count elements of dst from element `offset` set to value (in type t): one fill.
void fill_value(const group& g, scalar_type t, kiln::detail::memory_impl& dst, std::int64_t offset,
                std::int64_t count, double value);
// src (any device, any dtype: converted to t; its numel elements, row-major) copied into dst
// from element `offset`.
void write_slot(const group& g, scalar_type t, kiln::detail::memory_impl& dst, std::int64_t offset,
                const tensor& src);
// A new contiguous tensor of `shape` and type t holding a copy of src's elements from `offset`.
tensor read_slot(const group& g, scalar_type t, kiln::detail::memory_impl& src, std::int64_t offset,
                 const shape_t& shape);
// The parameters' type: for params and grads (nn::data_parallel writes gradients this way).
inline void write_slot(const group& g, kiln::detail::memory_impl& dst, std::int64_t offset,
                       const tensor& src) {
  write_slot(g, g.dtype, dst, offset, src);
}

}  // namespace kiln::optim::detail
