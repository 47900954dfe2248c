// Fixture machinery of the kiln::optim tests: the conformance suite's per-device fixture under
// the prefix "optim" (`ctest -R optim`), parameters and gradients from seeded host data (never
// zero), and scalar double-precision models of each update rule written from PyTorch's
// formulas, so every device result is checked against an independent host computation.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <kiln/optim.hpp>
#include <kiln/tensor.hpp>
#include <kiln/tensor/inplace.hpp>

#include "conformance/backends.hpp"

namespace optim_test {

using kiln::shape_t;

#define KILN_INSTANTIATE_OPTIM_PER_DEVICE(Suite)                                           \
  INSTANTIATE_TEST_SUITE_P(optim, Suite, ::testing::ValuesIn(::conformance::device_ids()), \
                           ::conformance::device_param_name)

inline std::int64_t numel(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Several parameters of different shapes (sizes not multiples of the slot alignment).
inline const std::vector<shape_t>& test_shapes() {
  static const std::vector<shape_t> s{{3, 4}, {5}, {2, 3, 2}, {}};
  return s;
}

template <class T>
std::vector<T> values(const shape_t& shape, std::uint64_t seed, T lo = T(-4), T hi = T(4)) {
  return conformance::random_values<T>(static_cast<std::size_t>(numel(shape)), seed, lo, hi);
}

template <class T>
kiln::tensor make_param(const kiln::device& dev, const shape_t& shape, std::uint64_t seed) {
  auto p = kiln::tensor::from(dev, values<T>(shape, seed), shape);
  p.requires_grad_();
  return p;
}

// Writes g into p's gradient: into the stored grad() in place (the optimizer's slot), or by
// replacing it with set_grad (the slower path step() copies from).
template <class T>
void give_grad(const kiln::tensor& p, const std::vector<T>& g, bool in_place) {
  const auto t = kiln::tensor::from(p.get_device(), g, p.shape());
  if (!in_place) return p.set_grad(t);
  kiln::no_grad off;
  kiln::copy_(p.grad(), t);
}

// One element's state in the models: up to three buffers.
using ref_state = std::array<double, 3>;
// p and s updated for step t (1-based) with gradient g at learning rate lr.
using ref_rule = std::function<void(std::int64_t t, double lr, double& p, double g, ref_state& s)>;

inline ref_rule ref_sgd(const kiln::optim::sgd_options& o) {
  return [o](std::int64_t t, double lr, double& p, double g, ref_state& s) {
    g += o.weight_decay * p;
    if (o.momentum != 0) {
      s[0] = t == 1 ? g : o.momentum * s[0] + (1 - o.dampening) * g;
      g = o.nesterov ? g + o.momentum * s[0] : s[0];
    }
    p -= lr * g;
  };
}

// Adam (L2 in the gradient) and AdamW (decoupled): s = {m, v, vmax}.
inline ref_rule ref_adam(double b1, double b2, double eps, double wd, bool amsgrad,
                         bool decoupled) {
  return [=](std::int64_t t, double lr, double& p, double g, ref_state& s) {
    if (decoupled)
      p *= 1 - lr * wd;
    else
      g += wd * p;
    s[0] = b1 * s[0] + (1 - b1) * g;
    s[1] = b2 * s[1] + (1 - b2) * g * g;
    s[2] = std::max(s[2], s[1]);
    const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
    const double v = amsgrad ? s[2] : s[1];
    p -= lr / bc1 * s[0] / (std::sqrt(v) / std::sqrt(bc2) + eps);
  };
}

// s = {square_avg, grad_avg, momentum_buffer}.
inline ref_rule ref_rmsprop(const kiln::optim::rmsprop_options& o) {
  return [o](std::int64_t, double lr, double& p, double g, ref_state& s) {
    g += o.weight_decay * p;
    s[0] = o.alpha * s[0] + (1 - o.alpha) * g * g;
    double avg = s[0];
    if (o.centered) {
      s[1] = s[1] + (1 - o.alpha) * (g - s[1]);
      avg -= s[1] * s[1];
    }
    avg = std::sqrt(avg) + o.eps;
    if (o.momentum > 0) {
      s[2] = o.momentum * s[2] + g / avg;
      p -= lr * s[2];
    } else {
      p -= lr * g / avg;
    }
  };
}

inline ref_rule ref_adagrad(const kiln::optim::adagrad_options& o) {
  return [o](std::int64_t t, double lr, double& p, double g, ref_state& s) {
    g += o.weight_decay * p;
    if (t == 1) s[0] = o.initial_accumulator_value;
    s[0] += g * g;
    p -= lr / (1 + double(t - 1) * o.lr_decay) * g / (std::sqrt(s[0]) + o.eps);
  };
}

// A named optimizer configuration and its model.
struct config {
  std::string name;
  std::function<kiln::optim::optimizer(const std::vector<kiln::tensor>&)> make;
  ref_rule model;
};

inline std::vector<config> all_configs() {
  using namespace kiln::optim;
  std::vector<config> c;
  auto add_sgd = [&](std::string n, sgd_options o) {
    c.push_back({"sgd " + n, [o](const auto& ps) { return sgd(ps, o); }, ref_sgd(o)});
  };
  add_sgd("plain", {.lr = 0.1});
  add_sgd("weight decay", {.lr = 0.1, .weight_decay = 0.05});
  add_sgd("momentum dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
  add_sgd("nesterov", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true});
  auto add_adam = [&](std::string n, adam_options o) {
    c.push_back({"adam " + n, [o](const auto& ps) { return adam(ps, o); },
                 ref_adam(o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, false)});
  };
  add_adam("defaults", {.lr = 0.01});
  add_adam("weight decay", {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1});
  add_adam("amsgrad", {.lr = 0.02, .eps = 1e-6, .amsgrad = true});
  auto add_adamw = [&](std::string n, adamw_options o) {
    c.push_back({"adamw " + n, [o](const auto& ps) { return adamw(ps, o); },
                 ref_adam(o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, true)});
  };
  add_adamw("defaults", {.lr = 0.01});
  add_adamw("amsgrad", {.lr = 0.01, .weight_decay = 0.3, .amsgrad = true});
  auto add_rmsprop = [&](std::string n, rmsprop_options o) {
    c.push_back({"rmsprop " + n, [o](const auto& ps) { return rmsprop(ps, o); }, ref_rmsprop(o)});
  };
  add_rmsprop("defaults", {});
  add_rmsprop("momentum", {.lr = 0.005, .momentum = 0.9});
  add_rmsprop("centered", {.alpha = 0.9, .weight_decay = 0.1, .momentum = 0.5, .centered = true});
  auto add_adagrad = [&](std::string n, adagrad_options o) {
    c.push_back({"adagrad " + n, [o](const auto& ps) { return adagrad(ps, o); }, ref_adagrad(o)});
  };
  add_adagrad("defaults", {});
  add_adagrad("decay",
              {.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.1, .initial_accumulator_value = 0.5});
  return c;
}

}  // namespace optim_test
