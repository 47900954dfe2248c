// Questions about an input's layout that choose indexing code. Generated kernels depend only on
// these answers (never on sizes or on the value of a general stride, which are run-time
// parameters), so they are what structural hashes see of a layout.
#pragma once

#include <cstdint>

#include "kiln/ir/node.hpp"

namespace kiln::ir {

// How one dimension advances: not at all (broadcast), by one element, or by a parameter.
enum class stride_class : std::uint8_t { zero, one, general };

// A dimension of size 1 is always read at position 0, so its stride never matters: zero.
inline stride_class classify(std::int64_t dim, std::int64_t stride) {
  if (dim == 1 || stride == 0) return stride_class::zero;
  return stride == 1 ? stride_class::one : stride_class::general;
}

// Row-major contiguous over its dims: the element at flat position i is at offset i.
inline bool is_flat(const layout& l) {
  std::int64_t expect = 1;
  for (int k = l.rank - 1; k >= 0; --k) {
    if (l.dims[k] != 1 && l.strides[k] != expect) return false;
    expect *= l.dims[k];
  }
  return true;
}

}  // namespace kiln::ir
