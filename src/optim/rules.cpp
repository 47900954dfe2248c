// The update rules (torch.optim's single-tensor formulas; Adam as PyTorch's fused kernel):
// options checked as PyTorch checks them, then the element update in the kernel language and
// its scalars computed on the host per step. Options that are off (weight decay 0, no
// momentum) leave their code and buffers out of the kernel altogether.
#include <cmath>
#include <string>

#include "optim/optim_impl.hpp"

namespace kiln::optim {
namespace {

using detail::check_option;

void check_common(const char* fn, double lr, double weight_decay) {
  check_option(lr >= 0, fn, "lr", "at least 0", lr);
  check_option(weight_decay >= 0, fn, "weight_decay", "at least 0", weight_decay);
}

// L2 weight decay added to the gradient, when on: one scalar "wd".
void add_weight_decay(detail::update_rule& r, double weight_decay) {
  if (weight_decay == 0) return;
  r.scalars.push_back("wd");
  r.decay_scalars.push_back("wd");
  r.body += "    gv = gv + wd * pv;\n";
}

struct adam_like {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
  std::vector<tensor> no_decay = {};
};

optimizer make_adam(const char* fn, const std::vector<tensor>& params, const adam_like& o) {
  check_common(fn, o.lr, o.weight_decay);
  check_option(o.eps >= 0, fn, "eps", "at least 0", o.eps);
  check_option(o.beta1 >= 0 && o.beta1 < 1, fn, "beta1", "in [0, 1)", o.beta1);
  check_option(o.beta2 >= 0 && o.beta2 < 1, fn, "beta2", "in [0, 1)", o.beta2);
  detail::update_rule r;
  r.name = fn;
  r.buffers = {"exp_avg", "exp_avg_sq"};
  r.scalars = {"beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "lr", "eps"};
  // Bias corrections from the device's step count, in the element type (as PyTorch's fused
  // Adam computes them in its math type).
  r.prologue =
      "  const T_ step_size = lr / ((T_)1 - pow(beta1, (T_)t));\n"
      "  const T_ bc2_sqrt = sqrt((T_)1 - pow(beta2, (T_)t));\n";
  if (o.decoupled && o.weight_decay != 0) {
    r.scalars.push_back("lr_wd");
    r.decay_scalars.push_back("lr_wd");
    r.body += "    pv = pv - lr_wd * pv;\n";
  } else {
    add_weight_decay(r, o.weight_decay);
  }
  r.body +=
      "    const T_ m = beta1 * st_exp_avg[i] + one_minus_beta1 * gv;\n"
      "    T_ v = beta2 * st_exp_avg_sq[i] + one_minus_beta2 * gv * gv;\n"
      "    st_exp_avg[i] = m;\n"
      "    st_exp_avg_sq[i] = v;\n";
  if (o.amsgrad) {
    r.buffers.push_back("max_exp_avg_sq");
    r.body +=
        "    v = fmax(st_max_exp_avg_sq[i], v);\n"
        "    st_max_exp_avg_sq[i] = v;\n";
  }
  r.body += "    pv = pv - step_size * m / (sqrt(v) / bc2_sqrt + eps);\n";
  r.initial.assign(r.buffers.size(), 0);
  r.values = [o](double lr) {
    std::vector<double> v{o.beta1, 1 - o.beta1, o.beta2, 1 - o.beta2, lr, o.eps};
    if (o.weight_decay != 0) v.push_back(o.decoupled ? lr * o.weight_decay : o.weight_decay);
    return v;
  };
  return detail::make_optimizer(params, std::move(r), o.lr, o.no_decay);
}

}  // namespace

optimizer sgd(const std::vector<tensor>& params, const sgd_options& o) {
  check_common("sgd", o.lr, o.weight_decay);
  check_option(o.momentum >= 0, "sgd", "momentum", "at least 0", o.momentum);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw invalid_argument("kiln::optim::sgd: nesterov needs momentum > 0 and dampening 0, got " +
                           std::to_string(o.momentum) + " and " + std::to_string(o.dampening));
  detail::update_rule r;
  r.name = "sgd";
  r.scalars = {"lr"};
  add_weight_decay(r, o.weight_decay);
  const bool momentum = o.momentum != 0;
  if (momentum) {
    // The buffer starts as the first gradient: keep 0, take 1 on step 1 (0 * 0 + 1 * g is g).
    r.buffers = {"momentum_buffer"};
    r.scalars.insert(r.scalars.end(), {"one_minus_dampening", "momentum"});
    r.prologue =
        "  const T_ keep = t == 1 ? (T_)0 : momentum;\n"
        "  const T_ take = t == 1 ? (T_)1 : one_minus_dampening;\n";
    r.body +=
        "    const T_ b = keep * st_momentum_buffer[i] + take * gv;\n"
        "    st_momentum_buffer[i] = b;\n";
    r.body += o.nesterov ? "    gv = gv + momentum * b;\n" : "    gv = b;\n";
  }
  r.body += "    pv = pv - lr * gv;\n";
  r.initial.assign(r.buffers.size(), 0);
  r.values = [o, momentum](double lr) {
    std::vector<double> v{lr};
    if (o.weight_decay != 0) v.push_back(o.weight_decay);
    if (momentum) v.insert(v.end(), {1 - o.dampening, o.momentum});
    return v;
  };
  return detail::make_optimizer(params, std::move(r), o.lr);
}

optimizer adam(const std::vector<tensor>& params, const adam_options& o) {
  return make_adam("adam", params,
                   {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, false});
}

optimizer adamw(const std::vector<tensor>& params, const adamw_options& o) {
  return make_adam(
      "adamw", params,
      {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, true, o.no_weight_decay});
}

optimizer rmsprop(const std::vector<tensor>& params, const rmsprop_options& o) {
  check_common("rmsprop", o.lr, o.weight_decay);
  check_option(o.eps >= 0, "rmsprop", "eps", "at least 0", o.eps);
  check_option(o.alpha >= 0, "rmsprop", "alpha", "at least 0", o.alpha);
  check_option(o.momentum >= 0, "rmsprop", "momentum", "at least 0", o.momentum);
  detail::update_rule r;
  r.name = "rmsprop";
  r.buffers = {"square_avg"};
  r.scalars = {"lr", "alpha", "one_minus_alpha", "eps"};
  add_weight_decay(r, o.weight_decay);
  r.body +=
      "    const T_ s = alpha * st_square_avg[i] + one_minus_alpha * gv * gv;\n"
      "    st_square_avg[i] = s;\n";
  if (o.centered) {
    r.buffers.push_back("grad_avg");
    r.body +=
        "    const T_ a = st_grad_avg[i] + one_minus_alpha * (gv - st_grad_avg[i]);\n"
        "    st_grad_avg[i] = a;\n"
        "    const T_ avg = sqrt(s - a * a) + eps;\n";
  } else {
    r.body += "    const T_ avg = sqrt(s) + eps;\n";
  }
  if (o.momentum != 0) {
    r.buffers.push_back("momentum_buffer");
    r.scalars.push_back("momentum");
    r.body +=
        "    const T_ b = momentum * st_momentum_buffer[i] + gv / avg;\n"
        "    st_momentum_buffer[i] = b;\n"
        "    pv = pv - lr * b;\n";
  } else {
    r.body += "    pv = pv - lr * (gv / avg);\n";
  }
  r.initial.assign(r.buffers.size(), 0);
  r.values = [o](double lr) {
    std::vector<double> v{lr, o.alpha, 1 - o.alpha, o.eps};
    if (o.weight_decay != 0) v.push_back(o.weight_decay);
    if (o.momentum != 0) v.push_back(o.momentum);
    return v;
  };
  return detail::make_optimizer(params, std::move(r), o.lr);
}

optimizer adagrad(const std::vector<tensor>& params, const adagrad_options& o) {
  check_common("adagrad", o.lr, o.weight_decay);
  check_option(o.lr_decay >= 0, "adagrad", "lr_decay", "at least 0", o.lr_decay);
  check_option(o.initial_accumulator_value >= 0, "adagrad", "initial_accumulator_value",
               "at least 0", o.initial_accumulator_value);
  check_option(o.eps >= 0, "adagrad", "eps", "at least 0", o.eps);
  detail::update_rule r;
  r.name = "adagrad";
  r.buffers = {"sum"};
  r.initial = {o.initial_accumulator_value};
  r.scalars = {"lr", "lr_decay", "eps"};
  r.prologue = "  const T_ clr = lr / ((T_)1 + (T_)(t - 1) * lr_decay);\n";
  add_weight_decay(r, o.weight_decay);
  r.body +=
      "    const T_ s = st_sum[i] + gv * gv;\n"
      "    st_sum[i] = s;\n"
      "    pv = pv - clr * (gv / (sqrt(s) + eps));\n";
  r.values = [o](double lr) {
    std::vector<double> v{lr, o.lr_decay, o.eps};
    if (o.weight_decay != 0) v.push_back(o.weight_decay);
    return v;
  };
  return detail::make_optimizer(params, std::move(r), o.lr);
}

}  // namespace kiln::optim
