// Gradients of layer_norm and rms_norm: their backward kernels, given the saved mean and rstd.
#include "autograd/derivatives_norm.hpp"

#include "autograd/graph.hpp"

namespace kiln::detail::grad {

tensor layer_norm(bool rms, const tensor& x, const shape_t& normalized_shape, const tensor& w,
                  const tensor& b, const layer_norm_result& r) {
  const tensor mean = r.mean, rstd = r.rstd;
  const shape_t ns = normalized_shape;
  return autograd::record(
      rms ? "rms_norm" : "layer_norm", r.output, {x, w, b},
      [rms, x, w, b, ns, mean, rstd](const tensor& g, const tensor&) -> std::vector<tensor> {
        const bool want_w = needs_grad(w.impl().get()), want_b = needs_grad(b.impl().get());
        const tensor dy = g.dtype() == x.dtype() ? g : g.to(x.dtype());
        const layer_norm_grads d =
            rms ? rms_norm_backward(dy, x, ns, rstd, w, want_w)
                : layer_norm_backward(dy, x, ns, mean, rstd, w, want_w, want_b);
        return {d.input, d.weight, d.bias};
      });
}

}  // namespace kiln::detail::grad
