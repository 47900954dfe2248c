// Reading and writing ranges of a group's flat buffers (construction, gradients replaced by
// set_grad, state dicts).
#pragma once

#include <cstdint>

#include "optim/optim_impl.hpp"

namespace kiln::optim::detail {

// count elements of dst from element `offset` set to value (in the group's dtype): one fill.
void fill_value(const group& g, kiln::detail::memory_impl& dst, std::int64_t offset,
                std::int64_t count, double value);
// src (any device, any dtype: converted; its numel elements, row-major) copied into dst from
// element `offset`, on the group's device's default queue.
void write_slot(const group& g, kiln::detail::memory_impl& dst, std::int64_t offset,
                const tensor& src);
// A new contiguous tensor of `shape` holding a copy of src's elements from `offset`.
tensor read_slot(const group& g, kiln::detail::memory_impl& src, std::int64_t offset,
                 const shape_t& shape);

}  // namespace kiln::optim::detail
