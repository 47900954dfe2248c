// Linear algebra on kiln::tensor: matmul (PyTorch semantics), gemm and gemv into a given output,
// and 2-D transposes. Products run through kiln::linalg (cuBLAS on CUDA, OpenBLAS on the CPU,
// the portable tiled kernel elsewhere); f32, f64, f16 and bf16. Lazy operands are evaluated first
// (a product is a fusion boundary) and every result is a stored tensor.
//
//   auto a = kiln::tensor::from(dev, host_a, {8, 4, 3});   // a batch of 8 4 x 3 matrices
//   auto w = kiln::tensor::from(dev, host_w, {5, 3});
//   auto y = kiln::matmul(a, w.t());                       // [8, 4, 5]: w.t() is the trans flag
//   auto d = kiln::matmul(v, v);                           // 1-D . 1-D: rank-0 dot product
//   auto c = kiln::tensor::zeros(dev, {4, 5});
//   kiln::gemm(a.slice(0, 0, 1).squeeze(0), w, c, 2.0, 1.0, false, true);   // c = 2 a0 w^T + c
//   auto at = kiln::transpose_copy(w);                     // [3, 5], contiguous
//   kiln::transpose_(square);                              // in place, square matrices only
//
// docs/tensor.md ("Linear algebra") has the layouts that run without a copy and the errors.
#pragma once

#include "kiln/tensor.hpp"

namespace kiln {

// tf32: f32 products may use TensorFloat-32 where the library has it (cuBLAS on sm_80+),
// ~1e-3 relative error; ignored elsewhere (full f32).
struct matmul_options {
  bool tf32 = false;
};

// PyTorch's torch.matmul: 1-D . 1-D is a dot product (rank 0); 2-D . 2-D a matrix product;
// a 1-D operand is promoted to a matrix (a row on the left, a column on the right) and that
// dimension removed from the result; batch dimensions (all but the last two) broadcast
// (NumPy rules). Errors: kiln::dtype_error (not a float type, or two dtypes), kiln::shape_error
// (rank 0, inner sizes differ, batch shapes do not broadcast; both shapes named),
// kiln::device_mismatch.
tensor matmul(const tensor& a, const tensor& b, const matmul_options& o = {});

// c = alpha op(a) op(b) + beta c, written into c, which is returned. a and b are matrices (or
// batches of them, broadcasting to c's batch dimensions); op(x) is x or, with trans, x with its
// last two dimensions swapped (a view, no copy). c must be stored (a lazy c is evaluated
// first) with rows or columns at unit stride and the other dimension's stride at least a row
// (column); its matrices may not overlap. beta 0 never reads c. c must not overlap a or b.
tensor gemm(const tensor& a, const tensor& b, const tensor& c, double alpha = 1, double beta = 0,
            bool trans_a = false, bool trans_b = false, const matmul_options& o = {});

// y = alpha op(a) x + beta y, written into y (1-D), which is returned; a is 2-D, x 1-D.
tensor gemv(const tensor& a, const tensor& x, const tensor& y, double alpha = 1, double beta = 0,
            bool trans = false);

// A new contiguous tensor holding x^T (x 2-D, any dtype, any strides): one tiled kernel
// through local memory on devices with barriers, a strided-copy kernel on the CPU backend.
tensor transpose_copy(const tensor& x);
// Transposes a square 2-D tensor in place (swaps across the diagonal, one kernel) and
// returns it. x must be stored row- or column-major (a lazy x is evaluated first).
tensor transpose_(const tensor& x);

}  // namespace kiln
