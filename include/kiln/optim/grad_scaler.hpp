// Loss scaling for f16 mixed precision (PyTorch's torch.amp.GradScaler): the loss is multiplied
// by a large scale before backward so small f16 gradients do not flush to zero; step()
// unscales the gradients, and skips the optimizer's step when any is inf or NaN; update()
// halves the scale after an overflow and doubles it after `growth_interval` clean steps.
//
//   kiln::optim::grad_scaler scaler;
//   {
//     kiln::autocast mixed(kiln::scalar_type::f16);
//     scaler.scale(kiln::nn::cross_entropy(model.forward(x), y)).backward();
//   }
//   scaler.step(opt);      // unscale, check, step (or skip)
//   scaler.update();
#pragma once

#include "kiln/optim.hpp"

namespace kiln::optim {

struct grad_scaler_options {
  double init_scale = 65536.0;
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int growth_interval = 2000;   // > 0
  bool enabled = true;          // false: scale() and step() pass through
};

class grad_scaler {
 public:
  explicit grad_scaler(const grad_scaler_options& o = {});  // bad options: invalid_argument
  tensor scale(const tensor& loss) const;                   // loss * scale (lazy)
  // Unscales the gradients of opt's parameters in place, then steps unless one of them holds
  // inf or NaN (one read back to the host). True when it stepped.
  bool step(optimizer& opt);
  // After step(): backoff on an overflow, growth after growth_interval clean steps in a row.
  void update();
  double get_scale() const { return scale_; }
  bool last_step_skipped() const { return found_inf_; }

 private:
  grad_scaler_options o_;
  double scale_;
  int clean_steps_ = 0;
  bool found_inf_ = false, stepped_since_update_ = false;
};

}  // namespace kiln::optim
