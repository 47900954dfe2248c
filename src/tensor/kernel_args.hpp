// Binding a generated tensor kernel's arguments: memory at an offset, and captured scalars.
#pragma once

#include <vector>

#include "kiln/ir/node.hpp"
#include "kiln/kernel.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

inline void add_mem(std::vector<arg_binding>& a, memory_impl& m, std::uint64_t byte_off,
                    scalar_type t) {
  arg_binding b;
  b.is_mem = true;
  b.mem = &m;
  b.byte_offset = byte_off;
  b.type = t;
  a.push_back(b);
}

inline void add_scalar(std::vector<arg_binding>& a, const ir::capture& c) {
  arg_binding b;
  b.type = c.type;
  b.size = static_cast<std::uint32_t>(size_of(c.type));
  b.scalar = c.bits;
  a.push_back(b);
}

// A stored tensor's memory from its first element, bound as elements of type `as`.
inline arg_binding tensor_mem(const tensor_impl& x, scalar_type as, bool is_const) {
  arg_binding b;
  b.is_mem = true;
  b.mem = x.mem.get();
  b.byte_offset = static_cast<std::uint64_t>(x.offset) * size_of(x.dtype);
  b.type = as;
  b.is_const = is_const;
  return b;
}

}  // namespace kiln::detail
