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
//   scaler.step(opt);      // unscale, check, step (or skip): no host sync
//   scaler.update();       // no host sync
//
// To clip, unscale first: scaler.unscale_(opt); clip_grad_norm_(opt, 1.0); scaler.step(opt);
//
// No host sync per step: the scale, the found-inf flag and the count of clean steps live in
// device memory, on the device of the first loss given to scale() (or of the optimizer). step()
// is one fill (the flag) and one kernel per parameter group that unscales the gradients in place
// and raises the flag on inf/NaN, then the optimizer's step kernels, which skip when the flag is
// up (parameters, state and step count unchanged, as PyTorch); update() is one kernel. Only the
// accessors marked "reads back" wait for the device. The optimizer's parameters must all be on
// the scaler's device (else kiln::invalid_argument).
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/optim.hpp"

namespace kiln::optim {

struct grad_scaler_options {
  double init_scale = 65536.0;  // stored as f32: finite in f32
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int growth_interval = 2000;   // in [1, 2^24] (counted in f32 on the device)
  bool enabled = true;          // false: scale() and step() pass through
};

namespace detail {
struct scaler_state;
}

class grad_scaler {
 public:
  // What step() returns: converting it to bool reads the found-inf flag back (a host sync) and
  // says whether the step was taken; left unconverted, nothing waits. Valid until the next
  // step() of the same scaler (then kiln::invalid_argument).
  class step_result {
   public:
    operator bool() const;  // NOLINT: implicit, so `bool stepped = scaler.step(opt)` compiles

   private:
    friend class grad_scaler;
    std::shared_ptr<detail::scaler_state> state_;
    std::uint64_t step_ = 0;
  };

  explicit grad_scaler(const grad_scaler_options& o = {});  // bad options: invalid_argument
  tensor scale(const tensor& loss) const;                   // loss * scale (lazy, on device)
  // Unscales the gradients of opt's parameters in place and steps, skipped on the device when
  // one of them holds inf or NaN. No host sync (see step_result). After unscale_(opt) it only
  // steps (the gradients are unscaled already).
  step_result step(optimizer& opt);
  // PyTorch's unscale_: divides opt's gradients by the scale in place and checks them, now, so
  // they can be read or clipped (clip_grad_norm_) before step(opt). Once per optimizer between
  // update()s, and opt must be stepped before another optimizer of this scaler is unscaled or
  // stepped (one found-inf flag): else kiln::invalid_argument. No host sync.
  void unscale_(optimizer& opt);
  // After step(): backoff on an overflow, growth after growth_interval clean steps in a row, on
  // the device.
  void update();
  double get_scale() const;        // reads back (a host sync) once the state is on a device
  bool last_step_skipped() const;  // reads back (a host sync)

 private:
  detail::scaler_state& ready_for(const optimizer& opt, const char* fn);
  void unscale(optimizer& opt);

  grad_scaler_options o_;
  mutable std::shared_ptr<detail::scaler_state> state_;  // made on first use, on its device
};

}  // namespace kiln::optim
