// Gradient formulas of the tensor operations (PyTorch's derivatives.yaml, as code). Each
// operation's public function computes its result, then, when detail::grad_wanted says an
// input needs a gradient, hands it to one of these, which records the backward closure. The
// formulas are tensor expressions themselves: lazy, so chains of them fuse.
#pragma once

#include <string>

#include "autograd/graph.hpp"
#include "kiln/tensor/conv.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/normalization.hpp"

namespace kiln::detail::grad {

// v as a captured scalar of like's dtype (f32 work never needs fp64).
tensor lit(const tensor& like, double v);

// ---- elementwise (derivatives_elementwise.cpp) ----
tensor binary(binary_op o, const tensor& a, const tensor& b, const tensor& out);
tensor unary(unary_op o, const tensor& a, const tensor& out);
// name: tan, rsqrt, square, floor, ceil, gelu, gelu_tanh, to
tensor math1(const std::string& name, const tensor& a, const tensor& out);
// name: pow, minimum, maximum
tensor math2(const std::string& name, const tensor& a, const tensor& b, const tensor& out);
tensor where(const tensor& cond, const tensor& a, const tensor& b, const tensor& out);
tensor clamp(const tensor& x, const tensor& out);  // out = clamp(x): gradient where unclamped

// ---- reductions and views (derivatives_reduce.cpp) ----
// name: sum, mean, max, min, var, std; `a`, keepdim and correction as given to the op
tensor reduction(const std::string& name, const tensor& x, const axes& a, bool keepdim,
                 std::int64_t correction, const tensor& out);
tensor norm(const tensor& x, double p, const axes& a, bool keepdim, const tensor& out);
tensor softmax(const tensor& x, int dim, bool log, const tensor& out);
// A view: reshape (view, reshape, squeeze, unsqueeze, flatten), permute (dims), expand
tensor reshape_view(const char* name, const tensor& x, const tensor& out);
tensor permute_view(const tensor& x, const std::vector<int>& dims, const tensor& out);
tensor expand_view(const tensor& x, const tensor& out);
tensor slice_view(const tensor& x, int dim, std::int64_t start, std::int64_t step,
                  const tensor& out);

// ---- products, convolution, pooling, normalisation (derivatives_nn.cpp) ----
tensor matmul(const tensor& a, const tensor& b, const matmul_options& o, const tensor& out);
tensor conv2d(const tensor& x, const tensor& w, const tensor& bias, const conv2d_options& o,
              const tensor& out);
tensor max_pool2d(const tensor& x, const tensor& indices, const pool2d_options& o,
                  const tensor& out);
tensor avg_pool2d(const tensor& x, const pool2d_options& o, const tensor& out);
tensor batch_norm(const tensor& x, const tensor& w, const tensor& b, const batch_norm_result& r,
                  bool training);

}  // namespace kiln::detail::grad
