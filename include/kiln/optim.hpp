// kiln::optim: fused optimizers (PyTorch's update rules) and learning-rate schedules.
//
//   std::vector<kiln::tensor> params = model.parameters();    // leaves with requires_grad_
//   auto opt = kiln::optim::adam(params, {.lr = 1e-3});
//   auto sched = kiln::optim::cosine_annealing_lr(opt, /*t_max=*/10);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     for (auto& [x, y] : batches) {
//       opt.zero_grad();                 // one fill per (device, dtype) group
//       loss(model(x), y).backward();    // accumulates in place into the optimizer's buffer
//       opt.step();                      // one kernel launch per (device, dtype) group
//     }
//     sched.step();
//   }
//
// At construction the parameters are grouped by (device, dtype) and each group is moved into
// ONE flat buffer: every parameter's storage is re-pointed at its slice (all handles sharing
// the parameter see it; views taken before construction keep the old storage). Gradients live
// in a second flat buffer (each parameter's grad() is a view of it, so backward accumulates in
// place), and the state (exp_avg, ...) in flat buffers too. step() is then one elementwise
// kernel per group over the flat buffers (and a one-item kernel that advances the group's step
// count, so a step replayed from a CUDA graph advances it too), zero_grad() one fill.
// docs/optim.md has the design.
//
// bf16 and f16 parameters get f32 master weights: the optimizer keeps an f32 copy of each, the
// step kernel updates the master and the state in f32 and writes the rounded 16-bit parameter
// (the same launches per group; gradients stay 16-bit). The step count lives on the device,
// so a step that optim::grad_scaler skips changes nothing, the count included.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::optim {

namespace detail {
struct optimizer_impl;
}

// (name, tensor) pairs: the state of an optimizer ("step", "lr", "state.<i>.<buffer>").
using state_dict_t = std::vector<std::pair<std::string, tensor>>;

// A handle to an optimizer (copies share it, as kiln::tensor handles do). Made by sgd, adam,
// adamw, rmsprop or adagrad below.
class optimizer {
 public:
  optimizer() = default;
  explicit optimizer(std::shared_ptr<detail::optimizer_impl> impl) : impl_(std::move(impl)) {}

  // One update of every parameter from its gradient: one kernel launch per (device, dtype)
  // group (kiln::last_tensor_stats() counts them). A gradient that is not the optimizer's
  // view any more (replaced by set_grad, or undefined) is first copied into the flat slot (an
  // undefined one as zeros: unlike PyTorch, such a parameter is still updated, by momentum and
  // weight decay), and the parameter's grad() points at the slot again.
  void step();
  // Zeroes every gradient: one fill per group; grad() of each parameter is its slot again.
  void zero_grad();
  double lr() const;
  void set_lr(double lr);  // negative: kiln::invalid_argument
  // step() calls that stepped so far (restored by load_state_dict); after a step a grad_scaler
  // may have skipped, the first call reads the device's count back (a sync).
  std::int64_t step_count() const;
  // The parameters, in the order given at construction (the same handles).
  const std::vector<tensor>& parameters() const;
  // "sgd", "adam", "adamw", "rmsprop", "adagrad".
  const std::string& name() const;

  // A snapshot (copies) of the state: "step" (int64, rank 0), "lr" (double, rank 0), then per
  // parameter i (construction order) its buffers "state.<i>.<buffer>" with the parameter's
  // shape and dtype, on its device: sgd "momentum_buffer" (with momentum), adam/adamw
  // "exp_avg", "exp_avg_sq" (+ "max_exp_avg_sq" with amsgrad), rmsprop "square_avg"
  // (+ "momentum_buffer" with momentum, "grad_avg" when centered), adagrad "sum"; for a 16-bit
  // parameter also "master" (its f32 master weights) and the buffers in f32. Other
  // hyper-parameters are not saved (they come from the options of the new optimizer).
  state_dict_t state_dict() const;
  // Restores what state_dict gave (from any device, any floating dtype: converted). Exactly
  // the names above: a missing or unexpected one is kiln::invalid_argument; a buffer of
  // another shape kiln::shape_error. Nothing is written unless everything checks.
  void load_state_dict(const state_dict_t& state);

  const std::shared_ptr<detail::optimizer_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::optimizer_impl> impl_;
};

// ---- optimizers: PyTorch's defaults and update rules (torch.optim) ----
// Errors: no parameters, a parameter that is undefined, does not require a gradient, is not a
// leaf, is kiln::automatic or is given twice: kiln::invalid_argument; a hyper-parameter out of
// range (negative lr, beta outside [0, 1), ...): kiln::invalid_argument naming it.

struct sgd_options {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2: added to the gradient
  bool nesterov = false;    // needs momentum > 0 and dampening 0
};
// g += wd p; b = g on the first step, else momentum b + (1 - dampening) g; g = nesterov ?
// g + momentum b : b (with momentum); p -= lr g.
optimizer sgd(const std::vector<tensor>& params, const sgd_options& o = {});

struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
};
// PyTorch's fused Adam: g += wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// (amsgrad: vmax = max(vmax, v), used for v); p -= lr / (1 - b1^t) * m /
// (sqrt(v) / sqrt(1 - b2^t) + eps). Bias corrections are computed on the host in double.
optimizer adam(const std::vector<tensor>& params, const adam_options& o = {});

struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p -= lr wd p before the Adam step
  bool amsgrad = false;
  // Parameters stepped without weight decay (PyTorch's second param group with weight_decay
  // 0; GPT recipes exempt biases and norms: optim::decay_split). Each must be in params.
  std::vector<tensor> no_weight_decay = {};
};
optimizer adamw(const std::vector<tensor>& params, const adamw_options& o = {});

// The parameters of a model that GPT recipes exempt from weight decay: those of fewer than 2
// dimensions (biases, norm weights). Pass as adamw_options::no_weight_decay.
std::vector<tensor> decay_split(const std::vector<tensor>& params);

struct rmsprop_options {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};
// g += wd p; s = alpha s + (1 - alpha) g^2; centered: a = a + (1 - alpha) (g - a),
// d = sqrt(s - a^2) + eps, else d = sqrt(s) + eps; momentum: b = momentum b + g / d,
// p -= lr b; else p -= lr g / d.
optimizer rmsprop(const std::vector<tensor>& params, const rmsprop_options& o = {});

struct adagrad_options {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};
// g += wd p; s += g^2; p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps).
optimizer adagrad(const std::vector<tensor>& params, const adagrad_options& o = {});

// ---- learning-rate schedules: step() once per epoch, after the epoch's optimizer steps ----
// Both read the optimizer's lr at construction as the base lr and set lr on each step()
// (PyTorch's closed forms; construction is epoch 0, lr = base).

// lr = base * gamma^floor(epoch / step_size). step_size < 1: kiln::invalid_argument.
class step_lr {
 public:
  step_lr(optimizer opt, std::int64_t step_size, double gamma = 0.1);
  void step();
  double last_lr() const { return last_lr_; }
  std::int64_t last_epoch() const { return epoch_; }

 private:
  optimizer opt_;
  std::int64_t step_size_;
  double gamma_, base_, last_lr_;
  std::int64_t epoch_ = 0;
};

// lr = eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2. t_max < 1:
// kiln::invalid_argument.
class cosine_annealing_lr {
 public:
  cosine_annealing_lr(optimizer opt, std::int64_t t_max, double eta_min = 0);
  void step();
  double last_lr() const { return last_lr_; }
  std::int64_t last_epoch() const { return epoch_; }

 private:
  optimizer opt_;
  std::int64_t t_max_;
  double eta_min_, base_, last_lr_;
  std::int64_t epoch_ = 0;
};

// Per optimizer step (call step() after each opt.step()): a linear warm-up from base / warmup
// to base over the first `warmup` steps, then a cosine from base to eta_min reached at step
// `total` (nanoGPT's schedule), eta_min after. Construction sets step 0's lr. warmup >= 0,
// total > warmup, eta_min >= 0, else kiln::invalid_argument.
class warmup_cosine_lr {
 public:
  warmup_cosine_lr(optimizer opt, std::int64_t warmup, std::int64_t total, double eta_min = 0);
  void step();
  double last_lr() const { return last_lr_; }
  std::int64_t last_step() const { return step_; }

 private:
  double at(std::int64_t s) const;
  optimizer opt_;
  std::int64_t warmup_, total_;
  double eta_min_, base_, last_lr_;
  std::int64_t step_ = 0;
};

}  // namespace kiln::optim
