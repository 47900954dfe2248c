// 2-D convolution and pooling on kiln::tensor, NCHW, with the backwards a training step needs.
// Convolutions run through cuDNN on CUDA (graph API, plan timed and cached per shape), oneDNN on
// the CPU, im2col + GEMM elsewhere; pooling runs as generated kernels (cuDNN for max pooling
// without indices and for average pooling). f32, f64, and f16/bf16 (cuDNN computes them in f32;
// elsewhere f32 and one rounding). Lazy operands are evaluated first: these are fusion boundaries,
// except the bias, which is added lazily (so conv2d(x, w, b) followed by relu is one extra
// kernel, not two).
//
//   auto x = kiln::tensor::randn(dev, {8, 3, 32, 32}, 1);    // N, C, H, W
//   auto w = kiln::tensor::randn(dev, {16, 3, 3, 3}, 2);     // K, C / groups, R, S
//   auto b = kiln::tensor::zeros(dev, {16});
//   auto y = kiln::relu(kiln::conv2d(x, w, b, {.stride = {1, 1}, .padding = {1, 1}}));
//   auto [m, idx] = kiln::max_pool2d_with_indices(y, {.kernel = {2, 2}});   // [8, 16, 16, 16]
//   auto dy = kiln::max_pool2d_backward(kiln::tensor::ones(dev, m.shape()), idx, y.shape(),
//                                      {.kernel = {2, 2}});
//   auto dx = kiln::conv2d_backward_data(dy, w, x.shape(), {.padding = {1, 1}});
//   auto dw = kiln::conv2d_backward_filter(x, dy, w.shape(), {.padding = {1, 1}});
//   auto db = dy.sum({0, 2, 3});                             // the bias gradient
//
// docs/tensor.md ("Convolution and pooling") has the output sizes, paths and tolerances.
#pragma once

#include <array>
#include <cstdint>

#include "kiln/tensor.hpp"

namespace kiln {

// Pairs are {rows, columns}. Output size per spatial dimension, as in PyTorch:
//   out = (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1.
struct conv2d_options {
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;  // input and output channels are split into this many groups
  bool tf32 = false;        // f32 may use TensorFloat-32 (cuDNN, sm_80+): ~1e-3 relative error
};

// y[n, k] = bias[k] + sum over c in k's group, r, s of x[n, c, ...] * weight[k, c, r, s].
// input [N, C, H, W], weight [K, C / groups, R, S], bias [K] or undefined; returns [N, K, P, Q].
// Errors: kiln::shape_error naming both shapes (ranks, channels, groups, an empty output),
// kiln::dtype_error (not a float type, or mixed), kiln::device_mismatch, kiln::invalid_argument
// (a stride or dilation below 1, negative padding).
tensor conv2d(const tensor& input, const tensor& weight, const tensor& bias = {},
              const conv2d_options& o = {});
// dL/dinput of conv2d, given dL/dy [N, K, P, Q] and the weight; input_shape is [N, C, H, W]
// (needed because several input sizes give the same output size).
tensor conv2d_backward_data(const tensor& grad_output, const tensor& weight,
                            const shape_t& input_shape, const conv2d_options& o = {});
// dL/dweight of conv2d, given the input and dL/dy; weight_shape is [K, C / groups, R, S].
tensor conv2d_backward_filter(const tensor& input, const tensor& grad_output,
                              const shape_t& weight_shape, const conv2d_options& o = {});

// Which implementation ran this thread's last conv2d call (forward or backward): for tests and
// reports. vendor: the device's "dnn" extension (cuDNN); portable: im2col + GEMM.
enum class conv_path { none, vendor, portable };
conv_path last_conv_path() noexcept;

// stride {0, 0} means the kernel size (PyTorch's default). Output size as for conv2d, with
// ceil_mode rounding up instead (a window must start inside the input or its left padding).
// Padding is at most half the kernel. Max pooling ignores padding; average pooling divides
// by the window's area (count_include_pad) or by its elements inside the input.
struct pool2d_options {
  std::array<std::int64_t, 2> kernel{2, 2};
  std::array<std::int64_t, 2> stride{0, 0};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

struct pooled {
  tensor values;   // [N, C, P, Q], the input's dtype
  tensor indices;  // [N, C, P, Q], int64: the winner's index within its H x W plane
};

// input [N, C, H, W] (or [C, H, W]: no batch, as in PyTorch). Ties go to the first element in
// row-major order; a NaN wins (propagates) as in PyTorch.
pooled max_pool2d_with_indices(const tensor& input, const pool2d_options& o = {});
tensor max_pool2d(const tensor& input, const pool2d_options& o = {});
// Scatters dL/dy to the winners: dL/dx has input_shape; each element sums the gradients of
// the windows it won (one gather kernel, no atomics: the same bits on every run). o must be
// the forward's options (they say which windows hold each element).
tensor max_pool2d_backward(const tensor& grad_output, const tensor& indices,
                           const shape_t& input_shape, const pool2d_options& o = {});

tensor avg_pool2d(const tensor& input, const pool2d_options& o = {});
tensor avg_pool2d_backward(const tensor& grad_output, const shape_t& input_shape,
                           const pool2d_options& o = {});

}  // namespace kiln
