// Layer normalisation and RMS normalisation on kiln::tensor (PyTorch's
// torch.nn.functional.layer_norm / rms_norm and their backwards): each row of the trailing
// normalized_shape dims is normalised by its own statistics, computed in f32 (f64 for f64
// inputs) also for f16/bf16 storage. Forward: one kernel on every device; backward: one for dx,
// one for dweight/dbias partials (and their sum). Records autograd when an operand requires a
// gradient.
//
//   auto x = kiln::tensor::randn(dev, {8, 128, 768}, 1);
//   auto w = kiln::tensor::ones(dev, {768}), b = kiln::tensor::zeros(dev, {768});
//   kiln::tensor y = kiln::layer_norm(x, {768}, w, b);        // eps 1e-5
//   kiln::tensor z = kiln::rms_norm(x, {768}, w);             // eps: f32's epsilon
//   auto r = kiln::native_layer_norm(x, {768}, w, b);         // r.mean, r.rstd [8, 128, 1]
//   auto g = kiln::layer_norm_backward(dy, x, {768}, r.mean, r.rstd, w, true, true);
//
// Dtypes: x is f32, f64, f16 or bf16; weight and bias have x's dtype, or f32 with a 16-bit x
// (PyTorch's mixed layer norm); the output has x's dtype. mean and rstd are f32 (f64 for f64),
// shaped x's leading dims followed by one 1 per normalised dim, as native_layer_norm's.
// Errors: kiln::shape_error (normalized_shape empty or not x's trailing dims, weight or bias
// not normalized_shape), kiln::dtype_error (integer or mismatched dtypes), kiln::device_mismatch,
// kiln::invalid_argument (undefined x, eps <= 0).
#pragma once

#include <optional>

#include "kiln/tensor.hpp"

namespace kiln {

struct layer_norm_result {
  tensor output;  // x's shape and dtype
  tensor mean;    // [x.shape[:-k], 1 x k]; undefined for rms_norm
  tensor rstd;    // 1 / sqrt(var + eps) (rms: 1 / sqrt(mean(x^2) + eps)), mean's shape
};

struct layer_norm_grads {
  tensor input, weight, bias;  // weight / bias undefined where not asked for
};

// y = (x - mean) * rstd * weight + bias over the trailing normalized_shape dims, the variance
// biased. weight and bias may be undefined (no affine transform), independently.
layer_norm_result native_layer_norm(const tensor& x, const shape_t& normalized_shape,
                                    const tensor& weight, const tensor& bias, double eps = 1e-5);
tensor layer_norm(const tensor& x, const shape_t& normalized_shape, const tensor& weight = {},
                  const tensor& bias = {}, double eps = 1e-5);

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps). eps defaults, as PyTorch's
// implementation does, to the epsilon of the computation type: 2^-23 (f32's) for f32, f16 and
// bf16, 2^-52 for f64. (PyTorch's documentation says finfo(x.dtype).eps; its kernel uses the
// op-math type's, which is what this matches.)
layer_norm_result native_rms_norm(const tensor& x, const shape_t& normalized_shape,
                                  const tensor& weight, std::optional<double> eps = {});
tensor rms_norm(const tensor& x, const shape_t& normalized_shape, const tensor& weight = {},
                std::optional<double> eps = {});

// Gradients given dL/dy and the forward's statistics. want_weight / want_bias: compute
// dweight (needs a weight) / dbias. Not itself recorded by autograd (no double backward).
layer_norm_grads layer_norm_backward(const tensor& grad_output, const tensor& x,
                                     const shape_t& normalized_shape, const tensor& mean,
                                     const tensor& rstd, const tensor& weight, bool want_weight,
                                     bool want_bias);
layer_norm_grads rms_norm_backward(const tensor& grad_output, const tensor& x,
                                   const shape_t& normalized_shape, const tensor& rstd,
                                   const tensor& weight, bool want_weight);

}  // namespace kiln
