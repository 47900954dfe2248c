// Gradients of the indexing operations (kiln/tensor/indexing.hpp), and the deterministic
// accumulations their backwards run (tensor/indexing.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/graph.hpp"
#include "kiln/tensor/indexing.hpp"

namespace kiln::detail {

// index_select's indices as its backward keeps them: each as a sort key with its position,
// written on the device by the forward (tensor/indexing_kernels.hpp's launch_sort_keys; a copy,
// so a later write to the index tensor does not change the gradient).
struct sort_keyed_index {
  tensor keys, pos;  // [max(n, 1)] of index_key_type(rows), index_position_type(n)
  std::int64_t n = 0;
};
// index (stored, int32/int64, 0-D or 1-D) keyed for rows rows (no host wait).
sort_keyed_index sort_keys_of(const tensor& index, std::int64_t rows);
// The gradient of index_select(x, dim, index) for x of shape xs: g's slices summed into the rows
// they came from, each row's in ascending position order (launch_index_add: a device sort, no
// host wait, no atomics). Indices outside x's dim add nothing. No recording.
tensor index_add_rows(const tensor& g, int dim, const sort_keyed_index& index, const shape_t& xs);
// x (or zeros of `shape` when x is undefined) plus src scattered by index along dim, summed in
// index order. No recording, no range check.
tensor scatter_add_into(const tensor& x, int dim, const tensor& index, const tensor& src,
                        const shape_t& shape);

// g written into [start, start + g.size(dim)) along dim of out (stored, contiguous, g's dtype),
// in place (one kernel).
void place_along(const tensor& out, const tensor& g, int dim, std::int64_t start);

namespace grad {
tensor index_select(const tensor& x, int dim, const sort_keyed_index& index, const tensor& out);
tensor gather(const tensor& x, int dim, const tensor& index, const tensor& out);
tensor scatter_add(const tensor& x, int dim, const tensor& index, const tensor& src,
                   const tensor& out);
tensor cat(const std::vector<tensor>& xs, int dim, const tensor& out);
// The pieces of one split share x's gradient: within a backward sweep the first piece to run
// allocates it (zeros of x's shape and dtype) and hands it to the engine; every piece places its
// own gradient into its slice, in place (x's gradient is read only after all its consumers
// ran). One fill and a copy per piece, where a zero-padded gradient per piece and their sum
// moved the whole of x's gradient four times (a GPT's q, k, v: 1.3 ms of a 11 ms step).
struct split_gradient {
  std::uint64_t pass = 0;  // the sweep `buffer` belongs to
  tensor buffer;
};
// out = x's slice [start, start + out.size(dim)) along dim (a split's piece).
tensor split_piece(const tensor& x, int dim, std::int64_t start, const tensor& out,
                   std::shared_ptr<split_gradient> shared);
}  // namespace grad

}  // namespace kiln::detail
