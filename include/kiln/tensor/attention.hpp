// Scaled dot-product attention (PyTorch's torch.nn.functional.scaled_dot_product_attention):
// softmax(q k^T * scale + mask) v over the last two dimensions, every leading dimension a batch
// (heads included) that broadcasts. Three ways to compute it, chosen per call (docs/tensor.md):
// the device library's flash attention (cuDNN on CUDA: bf16/f16, no mask or causal), Kiln's
// composed ops (matmuls and a fused masked softmax: every mask, every backend) and Kiln's own
// fused kernels (the scores never in memory, for sequences whose scores would not fit).
//
//   #include "kiln/tensor/attention.hpp"
//   auto q = kiln::tensor::randn(dev, {8, 6, 256, 64}, 1);   // [batch, heads, tokens, dim]
//   auto k = kiln::tensor::randn(dev, {8, 6, 256, 64}, 2), v = kiln::tensor::randn(dev, {8, 6, 256,
//   64}, 3); auto y = kiln::scaled_dot_product_attention(q, k, v, {}, /*is_causal=*/true);  // [8,
//   6, 256, 64]
#pragma once

#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

// q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev], q's dtype (f32, f64, f16, bf16;
// one dtype for all three). attn_mask broadcasts to [..., L, S]: bool (true: the position takes
// part) or q's dtype (added to the scores). is_causal: query i sees keys j <= i (the top-left
// aligned lower triangle, as PyTorch). scale: 1 / sqrt(E) when not given. A row whose every key
// is masked gives NaN (as PyTorch's math path). Errors: kiln::invalid_argument (undefined
// operands, attn_mask with is_causal), kiln::shape_error (rank below 2, E or S that differ, a
// mask that does not broadcast), kiln::dtype_error (mixed or non-float dtypes, a mask neither
// bool nor q's dtype), kiln::device_mismatch.
tensor scaled_dot_product_attention(const tensor& q, const tensor& k, const tensor& v,
                                    const tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// Which way this thread's last scaled_dot_product_attention call went: vendor (the device's
// library), composed or fused (Kiln's kernels); none before the first call. For tests and
// benchmarks; KILN_ATTENTION=vendor|composed|fused asks for one (vendor falls back to the
// others where the library does not take the call).
enum class attention_path { none, vendor, composed, fused };
attention_path last_attention_path() noexcept;

}  // namespace kiln
