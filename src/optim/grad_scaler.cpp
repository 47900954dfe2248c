// Loss scaling: scale, unscale-and-check, skip or step, and the scale's schedule.
#include "kiln/optim/grad_scaler.hpp"

#include <cmath>
#include <string>

#include "kiln/tensor/inplace.hpp"

namespace kiln::optim {

grad_scaler::grad_scaler(const grad_scaler_options& o) : o_(o), scale_(o.init_scale) {
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale) || !(o.growth_factor > 1) ||
      !(o.backoff_factor > 0 && o.backoff_factor < 1) || o.growth_interval <= 0)
    throw invalid_argument(
        "kiln::optim::grad_scaler: needs init_scale > 0 and finite, growth_factor > 1, "
        "backoff_factor in (0, 1) and growth_interval > 0");
}

tensor grad_scaler::scale(const tensor& loss) const {
  if (!loss.defined()) throw invalid_argument("kiln::optim::grad_scaler::scale: undefined loss");
  return o_.enabled ? loss * float(scale_) : loss;
}

bool grad_scaler::step(optimizer& opt) {
  stepped_since_update_ = true;
  found_inf_ = false;
  if (!o_.enabled) {
    opt.step();
    return true;
  }
  const float inv = float(1.0 / scale_);
  tensor probe;  // sum of every gradient times 0: NaN exactly when one holds inf or NaN
  for (const tensor& p : opt.parameters()) {
    const tensor g = p.grad();
    if (!g.defined()) continue;
    no_grad off;
    copy_(g, g * inv);
    const tensor z = (g * 0.f).sum().to(scalar_type::f32);
    probe = probe.defined() ? probe + z : z;
  }
  found_inf_ = probe.defined() && !std::isfinite(probe.item<float>());
  if (!found_inf_) opt.step();
  return !found_inf_;
}

void grad_scaler::update() {
  if (!o_.enabled || !stepped_since_update_) return;
  stepped_since_update_ = false;
  if (found_inf_) {
    scale_ *= o_.backoff_factor;
    clean_steps_ = 0;
  } else if (++clean_steps_ >= o_.growth_interval) {
    scale_ *= o_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace kiln::optim
