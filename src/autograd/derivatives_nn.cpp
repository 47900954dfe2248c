// Gradients of the products and the network operations: matmul (batched, broadcast, 1-D
// operands), conv2d (cuDNN's or the portable backward-data and backward-filter), pooling
// (through the indices max pooling saved) and batch normalisation.
#include "autograd/derivatives.hpp"

namespace kiln::detail::grad {

namespace {

// x as `shape`, without a copy when it has that shape already (reshape copies a view that is
// not contiguous, such as a transposed gradient).
tensor as_shape(const tensor& x, const shape_t& shape) {
  return x.shape() == shape ? x : x.reshape(shape);
}

// Whether x is a parameter or a one-input view of one (w.t() in linear): its gradient
// completes a leaf whose accumulation (and data_parallel's all-reduce) can start early, if no
// hook on it may write it (early_delivery_safe).
bool feeds_parameter(const tensor& x) {
  const auto is_param = [](const tensor_impl* t) {
    return t && t->ag && !t->ag->fn && t->ag->requires_grad && early_delivery_safe(*t);
  };
  const tensor_impl* t = x.impl().get();
  if (is_param(t)) return true;
  if (!t->ag || !t->ag->fn) return false;
  const auto& in = t->ag->fn->inputs;
  return in.size() == 1 && is_param(in[0].get());
}

// The gradient of b (as a matrix b2) for a2 b2 = g2. With one matrix b it is one GEMM over every
// batch row, in b's own layout: for a transposed b (w.t() of a row-major [n, k] weight) it is
// (g^T a)^T, so the weight's gradient comes out contiguous and its accumulation reads it in
// order instead of through a transpose.
tensor b_gradient(const tensor& a2, const tensor& b2, const tensor& g2, const matmul_options& o) {
  // Zero-size operands keep the batched form: their rows cannot be flattened by reshape(-1, k).
  if (b2.dim() != 2 || a2.numel() == 0 || g2.numel() == 0)
    return autograd::sum_to(kiln::matmul(a2.transpose(-1, -2), g2, o), b2.shape());
  const std::int64_t k = a2.size(-1), n = g2.size(-1);
  const tensor af = a2.dim() == 2 ? a2 : a2.reshape({-1, k});
  const tensor gf = g2.dim() == 2 ? g2 : g2.reshape({-1, n});
  const shape_t st = b2.strides();
  if (st[0] == 1 && st[1] != 1 && n > 1)
    return kiln::matmul(gf.transpose(0, 1), af, o).transpose(0, 1);
  return kiln::matmul(af.transpose(0, 1), gf, o);
}

}  // namespace

tensor matmul(const tensor& a, const tensor& b, const matmul_options& o, const tensor& out) {
  return autograd::record("matmul", out, {a, b}, [a, b, o](const tensor& g, const tensor&) {
    // As matrices: a 1-D a is a row [1, k], a 1-D b a column [k, 1]; g gets both dims back.
    const tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    const tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    shape_t gs = g.shape();
    if (a.dim() == 1) gs.insert(gs.end() - (b.dim() == 1 ? 0 : 1), 1);
    if (b.dim() == 1) gs.push_back(1);
    const tensor g2 = g.shape() == gs ? g : g.reshape(gs);
    std::vector<tensor> r(2);
    const bool want_a = needs_grad(a.impl().get());
    if (needs_grad(b.impl().get())) {
      r[1] = as_shape(b_gradient(a2, b2, g2, o), b.shape());
      // A weight's gradient first, handed over before the input's product is queued: its
      // accumulation and bucket all-reduce then overlap that product (and the layers below).
      if (want_a && feeds_parameter(b) && deliver_early(1, r[1])) r[1] = tensor();
    }
    if (want_a)
      r[0] = as_shape(autograd::sum_to(kiln::matmul(g2, b2.transpose(-1, -2), o), a2.shape()),
                      a.shape());
    return r;
  });
}

tensor conv2d(const tensor& x, const tensor& w, const tensor& bias, const conv2d_options& o,
              const tensor& out) {
  const shape_t xs = x.shape(), ws = w.shape();
  return autograd::record("conv2d", out, {x, w, bias},
                          [x, w, bias, o, xs, ws](const tensor& g, const tensor&) {
                            std::vector<tensor> r(3);
                            // An unbatched [C, H, W] input is a batch of one.
                            const bool one = xs.size() == 3;
                            const tensor g4 = one ? g.unsqueeze(0) : g;
                            shape_t xs4 = xs;
                            if (one) xs4.insert(xs4.begin(), 1);
                            const bool want_x = needs_grad(x.impl().get());
                            // The filter's and bias's gradients first, handed over before
                            // backward-data is queued (as matmul's weight gradient).
                            if (needs_grad(w.impl().get())) {
                              r[1] = conv2d_backward_filter(one ? x.unsqueeze(0) : x, g4, ws, o);
                              if (want_x && feeds_parameter(w) && deliver_early(1, r[1]))
                                r[1] = tensor();
                            }
                            if (needs_grad(bias.impl().get())) {
                              r[2] = g4.sum({0, 2, 3});
                              if (want_x && feeds_parameter(bias) && deliver_early(2, r[2]))
                                r[2] = tensor();
                            }
                            if (want_x) {
                              r[0] = conv2d_backward_data(g4, w, xs4, o);
                              if (one) r[0] = r[0].squeeze(0);
                            }
                            return r;
                          });
}

tensor max_pool2d(const tensor& x, const tensor& indices, const pool2d_options& o,
                  const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record("max_pool2d", out, {x},
                          [indices, xs, o](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {max_pool2d_backward(g, indices, xs, o)};
                          });
}

tensor avg_pool2d(const tensor& x, const pool2d_options& o, const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record("avg_pool2d", out, {x},
                          [xs, o](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {avg_pool2d_backward(g, xs, o)};
                          });
}

tensor batch_norm(const tensor& x, const tensor& w, const tensor& b, const batch_norm_result& r,
                  bool training) {
  const tensor mean = r.mean, invstd = r.invstd;
  return autograd::record(
      "batch_norm", r.output, {x, w, b},
      [x, w, mean, invstd, training](const tensor& g, const tensor&) -> std::vector<tensor> {
        batch_norm_grads d = batch_norm_backward(g, x, w, mean, invstd, training);
        return {d.input, d.weight, d.bias};
      });
}

}  // namespace kiln::detail::grad
