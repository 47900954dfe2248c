// Gradients of the products and the network operations: matmul (batched, broadcast, 1-D
// operands), conv2d (cuDNN's or the portable backward-data and backward-filter), pooling
// (through the indices max pooling saved) and batch normalisation.
#include "autograd/derivatives.hpp"

namespace kiln::detail::grad {

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
    if (needs_grad(a.impl().get()))
      r[0] = autograd::sum_to(kiln::matmul(g2, b2.transpose(-1, -2), o), a2.shape())
                 .reshape(a.shape());
    if (needs_grad(b.impl().get()))
      r[1] = autograd::sum_to(kiln::matmul(a2.transpose(-1, -2), g2, o), b2.shape())
                 .reshape(b.shape());
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
                            if (needs_grad(x.impl().get())) {
                              r[0] = conv2d_backward_data(g4, w, xs4, o);
                              if (one) r[0] = r[0].squeeze(0);
                            }
                            if (needs_grad(w.impl().get()))
                              r[1] = conv2d_backward_filter(one ? x.unsqueeze(0) : x, g4, ws, o);
                            if (needs_grad(bias.impl().get())) r[2] = g4.sum({0, 2, 3});
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
