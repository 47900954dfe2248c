// Selection and sampling (PyTorch's semantics; docs/indexing.md):
//
//   auto [values, indices] = kiln::topk(logits, 50);          // [B, 50] each, along the last dim
//   auto probs = kiln::softmax(values / temperature, -1);
//   auto pick = kiln::multinomial(probs, 1, true, step);     // int64 [B, 1], seeded
//   auto next = kiln::gather(indices, -1, pick);             // token ids
//
// topk: the k largest (or smallest) entries of x along dim, best first, and their int64
// positions. Every dtype but f16/bf16 compares natively; f16/bf16 compare in float. NaN ranks
// above every number (so first when largest, last when smallest); equal values rank by lower
// index. sorted = false is accepted and gives the same sorted result. k = 0 gives empty
// results; k < 0 or k > x.size(dim) is kiln::invalid_argument. values is differentiable: its
// gradient scatters back to the selected positions. Cost: O(n) per row for small k (chunks of
// the row in parallel, then a merge of the chunks' candidates), O(n k) for k near n.
//
// multinomial: num_samples category indices per row of probs (1-D [n] or 2-D [rows, n] of
// non-negative float weights, not necessarily normalised), int64 [num_samples] or [rows,
// num_samples]. With replacement: inverse CDF on each row's running sum with seeded Philox
// uniforms (tensor::rand's, double where the device has fp64): the same samples on every
// backend. Without (the default, as torch.multinomial): the exponential race (the num_samples
// smallest Exp(1) / w of Philox draws, in that order), equal across backends up to their log's
// last bit. A negative, inf or NaN weight, a row of zeros, num_samples <= 0, or (without
// replacement) more samples than a row has positive weights is kiln::invalid_argument (one
// fused check read back per call).
#pragma once

#include <cstdint>

#include "kiln/tensor.hpp"

namespace kiln {

struct topk_result {
  tensor values;   // x's dtype
  tensor indices;  // int64
};
topk_result topk(const tensor& x, std::int64_t k, int dim = -1, bool largest = true,
                 bool sorted = true);

tensor multinomial(const tensor& probs, std::int64_t num_samples, bool replacement = false,
                   std::uint64_t seed = 0);

}  // namespace kiln
