// Indexing, concatenation and masking (PyTorch's semantics; docs/indexing.md), each
// differentiable by kiln's autograd.
//
//   auto w = kiln::tensor::randn(dev, {50304, 768}, 1).requires_grad_();
//   auto ids = kiln::tensor::from(dev, std::vector<std::int64_t>{5, 7, 5, 1}, {2, 2});
//   auto e = kiln::embedding(w, ids);                    // [2, 2, 768]
//   auto causal = kiln::tril(kiln::tensor::ones(dev, {4, 4}), 0) == 0.f;   // bool [4, 4]
//   auto s = kiln::masked_fill(scores, causal, -INFINITY);      // lazy: fuses with neighbours
//   auto qkv = kiln::split(x, 768, -1);                  // three views of x [B, T, 3 * 768]
//   auto y = kiln::cat({a, b}, 1), z = kiln::stack({a, b}, 0);
//
// Indices are int32 or int64 tensors (else kiln::dtype_error) on the data's device; an index
// outside the indexed dimension is kiln::invalid_argument (checked by one fused reduction read
// back before the launch: a host wait per call; index_select and embedding read the indices
// back once, which their backward reuses). Negative dims count from the end.
// Backwards are deterministic (no floating-point atomics): embedding / index_select sum each
// row's occurrences in ascending position order through a CSR of the indices built on the host;
// gather / scatter_add sum along the index dimension in order (see docs/indexing.md for costs).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

// weight [V, D] (any dtype), indices of any shape -> [..indices.shape, D]: rows of weight.
tensor embedding(const tensor& weight, const tensor& indices);
// x's slices index[k] along dim (index 1-D or 0-D); the result's dim has index.numel() entries.
tensor index_select(const tensor& x, int dim, const tensor& index);
// out[c] = x[c with dim replaced by index[c]]; index has x's rank and index.size(d) <=
// x.size(d) for d != dim; the result has index's shape.
tensor gather(const tensor& x, int dim, const tensor& index);
// x with src[c] added at x[c with dim replaced by index[c]] for every c of index (index.size(d)
// <= src.size(d) for every d, <= x.size(d) for d != dim); duplicates are summed in index order
// along dim. Floating and integer dtypes (not bool); src has x's dtype.
tensor scatter_add(const tensor& x, int dim, const tensor& index, const tensor& src);

// x where mask (bool, broadcasting to x's shape) is false, value (converted to x's dtype)
// where it is true. Lazy: one elementwise node, fused with what reads and feeds it.
namespace detail {
tensor masked_fill_bits(const tensor& x, const tensor& mask, scalar_type from, std::uint64_t bits);
}
template <scalar T>
tensor masked_fill(const tensor& x, const tensor& mask, T value) {
  return detail::masked_fill_bits(x, mask, scalar_type_of<T>, detail::bits_of(value));
}
// The lower (tril: column <= row + k) or upper (triu: column >= row + k) triangle of the last
// two dims of x, zeros elsewhere. Lazy and fused, as masked_fill.
tensor tril(const tensor& x, std::int64_t k = 0);
tensor triu(const tensor& x, std::int64_t k = 0);

// Joins tensors of one dtype and device along dim (shapes equal except along dim): one copy
// kernel per non-empty input. stack inserts a new dim (shapes all equal).
tensor cat(const std::vector<tensor>& xs, int dim = 0);
tensor stack(const std::vector<tensor>& xs, int dim = 0);
// Views of x along dim: chunks of `size` (the last may be smaller), or of the given sizes
// (which must sum to x.size(dim)).
std::vector<tensor> split(const tensor& x, std::int64_t size, int dim = 0);
std::vector<tensor> split(const tensor& x, const std::vector<std::int64_t>& sizes, int dim = 0);

}  // namespace kiln
