// Learning-rate schedules: PyTorch's closed forms of StepLR and CosineAnnealingLR, from the
// optimizer's lr at construction (epoch 0).
#include <cmath>
#include <numbers>
#include <string>

#include "optim/optim_impl.hpp"

namespace kiln::optim {

step_lr::step_lr(optimizer opt, std::int64_t step_size, double gamma)
    : opt_(std::move(opt)), step_size_(step_size), gamma_(gamma) {
  detail::check_option(step_size >= 1, "step_lr", "step_size", "at least 1", double(step_size));
  detail::check_option(gamma >= 0, "step_lr", "gamma", "at least 0", gamma);
  base_ = last_lr_ = opt_.lr();
}

void step_lr::step() {
  ++epoch_;
  last_lr_ = base_ * std::pow(gamma_, double(epoch_ / step_size_));
  opt_.set_lr(last_lr_);
}

cosine_annealing_lr::cosine_annealing_lr(optimizer opt, std::int64_t t_max, double eta_min)
    : opt_(std::move(opt)), t_max_(t_max), eta_min_(eta_min) {
  detail::check_option(t_max >= 1, "cosine_annealing_lr", "t_max", "at least 1", double(t_max));
  detail::check_option(eta_min >= 0, "cosine_annealing_lr", "eta_min", "at least 0", eta_min);
  base_ = last_lr_ = opt_.lr();
}

void cosine_annealing_lr::step() {
  ++epoch_;
  last_lr_ = eta_min_ + (base_ - eta_min_) *
                            (1 + std::cos(std::numbers::pi * double(epoch_) / double(t_max_))) / 2;
  opt_.set_lr(last_lr_);
}

warmup_cosine_lr::warmup_cosine_lr(optimizer opt, std::int64_t warmup, std::int64_t total,
                                   double eta_min)
    : opt_(std::move(opt)), warmup_(warmup), total_(total), eta_min_(eta_min) {
  detail::check_option(warmup >= 0, "warmup_cosine_lr", "warmup", "at least 0", double(warmup));
  detail::check_option(total > warmup, "warmup_cosine_lr", "total", "more than warmup",
                       double(total));
  detail::check_option(eta_min >= 0, "warmup_cosine_lr", "eta_min", "at least 0", eta_min);
  base_ = opt_.lr();
  last_lr_ = at(0);
  opt_.set_lr(last_lr_);
}

double warmup_cosine_lr::at(std::int64_t s) const {
  if (s < warmup_) return base_ * double(s + 1) / double(warmup_);
  if (s >= total_) return eta_min_;
  const double progress = double(s - warmup_) / double(total_ - warmup_);
  return eta_min_ + (base_ - eta_min_) * (1 + std::cos(std::numbers::pi * progress)) / 2;
}

void warmup_cosine_lr::step() {
  last_lr_ = at(++step_);
  opt_.set_lr(last_lr_);
}

std::vector<tensor> decay_split(const std::vector<tensor>& params) {
  std::vector<tensor> out;
  for (const tensor& p : params)
    if (p.defined() && p.dim() < 2) out.push_back(p);
  return out;
}

}  // namespace kiln::optim
