// kiln::linear: PyTorch's torch.nn.functional.linear with its activation, y = act(x w^T + b),
// where the bias and the activation belong to the product. On CUDA with cuBLASLt, f32/f16/bf16
// and no gradient wanted, the whole thing is one GEMM whose epilogue adds the bias and applies
// the activation as it writes y; elsewhere (other backends, f64, autograd recording, the erf
// GELU) it is the matmul followed by one fused elementwise kernel, with the same result.
//
//   #include "kiln/tensor/linear.hpp"
//   auto x = kiln::tensor::randn(dev, {4096, 1024}, 1, kiln::scalar_type::bf16);
//   auto w = kiln::tensor::randn(dev, {4096, 1024}, 2, kiln::scalar_type::bf16);
//   auto b = kiln::tensor::randn(dev, {4096}, 3, kiln::scalar_type::bf16);
//   auto y = kiln::linear(x, w, b, "gelu_tanh");    // [4096, 4096] = gelu(x w^T + b)
//   auto z = kiln::linear(x, w);                     // x w^T, as matmul(x, w.t())
//
// docs/tensor.md ("Linear layers and fused epilogues") says which calls fuse.
#pragma once

#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

// x [..., in], w [out, in], b [out] or undefined; activation "none", "relu", "gelu" (erf, as
// kiln::gelu) or "gelu_tanh" (kiln::gelu(.., "tanh")). Result [..., out], x's dtype; under
// kiln::autocast the product runs in the scope's 16-bit type, as matmul. Differentiable.
// Errors: kiln::invalid_argument (unknown activation, undefined x or w), kiln::shape_error
// (w not 2-D, x's last size not w's columns, b not [out]), kiln::dtype_error (not a float, or
// mixed dtypes), kiln::device_mismatch.
tensor linear(const tensor& x, const tensor& w, const tensor& b = {},
              const std::string& activation = "none", const matmul_options& o = {});

// Which way this thread's last kiln::linear ran: "epilogue" (one vendor GEMM with the bias and
// activation in its epilogue), "bias epilogue" (the erf GELU: the bias in the GEMM, the GELU
// in one kernel after), or "separate" (matmul, then the tail as one fused kernel).
const char* last_linear_path() noexcept;

}  // namespace kiln
