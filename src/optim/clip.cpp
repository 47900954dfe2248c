// clip_grad_norm_ over the optimizer's flat gradient buffers: a sum of squares per group (one
// reduction), the norm and its factor on the device, then each group's gradients scaled by the
// grad_scaler's kernel (which multiplies by 1 / sc[1]; its inf check writes sc[0], unused here).
#include "kiln/optim/clip.hpp"

#include <cmath>
#include <string>

#include "kiln/tensor/inplace.hpp"
#include "optim/optim_impl.hpp"
#include "optim/scaler_state.hpp"
#include "runtime/runtime.hpp"

namespace kiln::optim {
namespace {

// The group's whole gradient buffer as a 1-D tensor (padding between slots holds zeros).
tensor flat_grads(const detail::group& g) {
  auto v = std::make_shared<kiln::detail::tensor_impl>();
  v->dev = g.dev;
  v->dtype = g.dtype;
  v->shape = {g.n};
  v->strides = {1};
  v->mem = g.grads;
  return tensor(v);
}

}  // namespace

tensor clip_grad_norm_(optimizer& opt, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw invalid_argument(
        "kiln::optim::clip_grad_norm_: max_norm must be positive and finite, "
        "got " +
        std::to_string(max_norm));
  detail::optimizer_impl& o = detail::impl_of(opt.impl());
  detail::reclaim_grads(o, true);  // every gradient in its flat slot first
  const device first = o.groups.front().dev;
  tensor total = tensor::zeros(first, {});
  for (const detail::group& g : o.groups) {
    if (g.n == 0) continue;
    const tensor v =
        g.dtype == scalar_type::f64 ? flat_grads(g) : flat_grads(g).to(scalar_type::f32);
    tensor part = (v * v).sum().to(scalar_type::f32);
    if (!(g.dev == first)) part = part.to(first);
    total = total + part;
  }
  const tensor norm = kiln::sqrt(total).eval();
  // The kernel divides by sc[1] = max(1, (norm + 1e-6) / max_norm).
  const tensor shifted = norm + 1e-6f;
  const tensor divisor =
      kiln::where(shifted > float(max_norm), shifted / float(max_norm), 1.f).reshape({1});
  for (const detail::group& g : o.groups) {
    if (g.n == 0) continue;
    const tensor sc = tensor::zeros(g.dev, {2});
    kiln::copy_(sc.slice(0, 1, 2), g.dev == first ? divisor : divisor.to(g.dev));
    const kernel k = detail::generated(g.dev, detail::unscale_source(g.dtype), "ko_unscale",
                                       std::string("gradient scaling of ") + type_name(g.dtype));
    kiln::detail::arg_binding args[] = {detail::mem_arg(*g.grads, g.dtype, false),
                                        detail::mem_arg(*sc.impl()->mem, scalar_type::f32, false),
                                        kiln::detail::bind_arg(g.n)};
    kiln::detail::launch(*k.impl(), *g.dev.default_queue().impl(),
                         range(detail::items_for(g.dev, g.n)), nullptr, args, 3);
  }
  return norm;
}

}  // namespace kiln::optim
