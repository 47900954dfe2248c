// Batch normalisation on kiln::tensor (PyTorch's batch_norm and its backward), over dimension 1
// of an [N, C, ...] input: per-channel statistics over every other dimension. Built from the
// fused reductions and elementwise kernels, so it runs on every device; f32 and f64.
//
//   auto x = kiln::tensor::randn(dev, {32, 16, 28, 28}, 1);
//   auto gamma = kiln::tensor::ones(dev, {16}), beta = kiln::tensor::zeros(dev, {16});
//   auto rm = kiln::tensor::zeros(dev, {16}), rv = kiln::tensor::ones(dev, {16});
//   auto bn = kiln::batch_norm(x, gamma, beta, rm, rv, /*training=*/true);   // updates rm, rv
//   auto g = kiln::batch_norm_backward(dy, x, gamma, bn.mean, bn.invstd, true);
//   // g.input [32, 16, 28, 28], g.weight [16], g.bias [16]
#pragma once

#include "kiln/tensor.hpp"

namespace kiln {

struct batch_norm_result {
  tensor output;  // lazy: (x - mean) * invstd * weight + bias, fused into what reads it
  tensor mean;    // [C]: the batch mean (training) or the running mean (inference)
  tensor invstd;  // [C]: 1 / sqrt(var + eps), var the biased batch variance or the running one
};

// training: normalise by the batch's statistics and, when running_mean and running_var are
// given, update them in place: r = (1 - momentum) r + momentum s, with the unbiased variance
// for running_var (PyTorch's rule). Inference: normalise by the running statistics (then
// required). weight and bias may be undefined (no affine transform). running_mean and
// running_var must be stored contiguous [C] tensors of the input's dtype and device.
// Errors: kiln::shape_error (rank below 2, a [C] operand of another size, training with one
// value per channel), kiln::dtype_error, kiln::device_mismatch, kiln::invalid_argument
// (inference without running statistics, eps <= 0).
batch_norm_result batch_norm(const tensor& input, const tensor& weight, const tensor& bias,
                             const tensor& running_mean, const tensor& running_var, bool training,
                             double momentum = 0.1, double eps = 1e-5);

struct batch_norm_grads {
  tensor input, weight, bias;  // weight and bias undefined when weight was
};

// Gradients of batch_norm given dL/doutput and the mean and invstd it returned. training says
// which statistics the forward used (batch statistics depend on the input; running ones not).
batch_norm_grads batch_norm_backward(const tensor& grad_output, const tensor& input,
                                     const tensor& weight, const tensor& mean, const tensor& invstd,
                                     bool training);

}  // namespace kiln
