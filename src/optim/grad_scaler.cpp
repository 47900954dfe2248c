// Loss scaling without a host sync: the scale, the found-inf flag and the clean-step count in
// one f32 buffer on the device; unscale-and-check is one kernel per parameter group, the skip
// happens in the optimizer's step kernels, and the schedule runs in a one-item kernel.
#include "kiln/optim/grad_scaler.hpp"

#include <atomic>
#include <cmath>
#include <string>

#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "optim/optim_impl.hpp"
#include "optim/scaler_state.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/runtime.hpp"

namespace kiln::optim {
namespace detail {
namespace {

std::atomic<std::uint64_t> host_reads{0};

// Element i of the state, read back (a host sync).
float read(const scaler_state& s, int i) {
  float v = 0;
  queue& q = s.dev.default_queue();
  kiln::detail::copy_d2h(*q.impl(), &v, *s.mem, sizeof(float) * i, sizeof v);
  q.finish();
  ++host_reads;
  return v;
}

}  // namespace

kernel generated(const device& dev, const std::string& source, const char* name,
                 const std::string& what) {
  ir::hasher h;
  h.add("grad scaler v1").add(source);
  const kiln::detail::generated_kernels k =
      kiln::detail::get_generated(dev, "grad_scaler", h.value(), [&] {
        return kiln::detail::generated_program{source, {name}, what};
      });
  return k.kernels.at(0);
}

// Gradients of type t multiplied by 1 / scale in place; found_inf raised on inf or NaN (every
// writer writes 1: the race is benign). (x - x == 0) is false exactly for inf and NaN.
std::string unscale_source(scalar_type t) {
  const bool r = is_reduced_float(t);
  const std::string math = t == scalar_type::f64 ? "double" : "float";
  const std::string load = r ? codegen::cat("kiln_", type_name(t), "_to_float(g[i])") : "g[i]";
  const std::string store = r ? codegen::cat("kiln_float_to_", type_name(t), "(v)") : "v";
  return codegen::cat("// grad_scaler: unscale and check ", type_name(t), " gradients\n",
                      "KILN_KERNEL void ko_unscale(KILN_GLOBAL ", type_name(t),
                      "* KILN_RESTRICT g, KILN_GLOBAL float* sc, int64_t n) {\n",  //
                      "  const ", math, " inv = (", math, ")1 / (", math, ")sc[1];\n",
                      "  const int64_t stride = (int64_t)kiln_global_size(0);\n",
                      "  for (int64_t i = (int64_t)kiln_global_id(0); i < n; i += stride) {\n",  //
                      "    const ", math, " v = ", load, " * inv;\n",                            //
                      "    if (!(v - v == 0)) { sc[0] = 1.0f; sc[3] = 1.0f; }\n",                //
                      "    g[i] = ", store, ";\n",                                               //
                      "  }\n}\n");
}

// PyTorch's _amp_update_scale_: backoff on inf/NaN, growth (when finite) after `interval` clean
// steps in a row.
const char* const update_source =
    "// grad_scaler: the scale's schedule\n"
    "KILN_KERNEL void ko_scaler_update(KILN_GLOBAL float* sc, float growth, float backoff,\n"
    "                                  float interval) {\n"
    "  if (kiln_global_id(0) != 0) return;\n"
    "  if (sc[3] != 0.0f) {  // an overflow in any step since the last update\n"
    "    sc[1] = sc[1] * backoff;\n"
    "    sc[2] = 0.0f;\n"
    "    sc[3] = 0.0f;\n"
    "  } else {\n"
    "    const float clean = sc[2] + 1.0f;\n"
    "    const float grown = sc[1] * growth;\n"
    "    if (clean >= interval && grown - grown == 0) {\n"
    "      sc[1] = grown;\n"
    "      sc[2] = 0.0f;\n"
    "    } else {\n"
    "      sc[2] = clean >= interval ? 0.0f : clean;\n"
    "    }\n"
    "  }\n"
    "}\n";

std::uint64_t scaler_host_reads() { return host_reads.load(); }

}  // namespace detail

namespace {

using detail::scaler_state;

std::shared_ptr<scaler_state> make_state(const device& dev, double init_scale) {
  auto s = std::make_shared<scaler_state>();
  s->dev = dev;
  // found_inf of the last step, the scale, clean steps in a row, found_inf of any step since
  // the last update (one scaler may step several optimizers between updates, as PyTorch's).
  s->mem = kiln::detail::allocate(dev, 4 * sizeof(float));
  const float init[4] = {0.f, static_cast<float>(init_scale), 0.f, 0.f};
  queue& q = dev.default_queue();
  kiln::detail::copy_h2d(*q.impl(), *s->mem, 0, init, sizeof init);
  q.finish();  // `init` goes out of scope (the copy may be asynchronous)
  auto v = std::make_shared<kiln::detail::tensor_impl>();
  v->dev = dev;
  v->dtype = scalar_type::f32;
  v->mem = s->mem;
  v->offset = 1;
  s->scale = tensor(std::move(v));
  return s;
}

}  // namespace

grad_scaler::grad_scaler(const grad_scaler_options& o) : o_(o) {
  if (!(o.init_scale > 0) || !std::isfinite(static_cast<float>(o.init_scale)) ||
      !(o.growth_factor > 1) || !(o.backoff_factor > 0 && o.backoff_factor < 1) ||
      o.growth_interval <= 0 || o.growth_interval > (1 << 24))
    throw invalid_argument(
        "kiln::optim::grad_scaler: needs init_scale > 0 and finite in f32, growth_factor > 1, "
        "backoff_factor in (0, 1) and growth_interval in [1, 2^24]");
}

tensor grad_scaler::scale(const tensor& loss) const {
  if (!loss.defined()) throw invalid_argument("kiln::optim::grad_scaler::scale: undefined loss");
  if (!o_.enabled) return loss;
  if (!state_) state_ = make_state(loss.get_device(), o_.init_scale);
  if (!(state_->dev == loss.get_device()))
    throw invalid_argument("kiln::optim::grad_scaler::scale: the loss is on " +
                           loss.get_device().id() + ", the scaler's state on " + state_->dev.id());
  return loss * state_->scale;
}

// The state, made on first use on the optimizer's device, which every group must be on.
scaler_state& grad_scaler::ready_for(const optimizer& opt, const char* fn) {
  const detail::optimizer_impl& o = detail::impl_of(opt.impl());
  if (!state_) state_ = make_state(o.groups.front().dev, o_.init_scale);
  scaler_state& s = *state_;
  for (const detail::group& g : o.groups)
    if (!(g.dev == s.dev))
      throw invalid_argument(std::string("kiln::optim::grad_scaler::") + fn +
                             ": a parameter is on " + g.dev.id() + ", the scaler's state on " +
                             s.dev.id() + " (one device per scaler)");
  const std::weak_ptr<const void> id = opt.impl();
  if (!s.unscaled.expired() && !detail::same_owner(s.unscaled, id))
    throw invalid_argument(std::string("kiln::optim::grad_scaler::") + fn +
                           ": another optimizer was unscale_()d and not stepped yet; step() it "
                           "first (the scaler has one found-inf flag)");
  return s;
}

// found_inf = 0, then each group's gradients divided by the scale in place and checked.
void grad_scaler::unscale(optimizer& opt) {
  detail::optimizer_impl& o = detail::impl_of(opt.impl());
  scaler_state& s = *state_;
  queue& q = s.dev.default_queue();
  const float zero = 0;
  kiln::detail::fill(*q.impl(), *s.mem, 0, &zero, sizeof zero, 1);  // found_inf = 0
  detail::reclaim_grads(o, true);  // every gradient in its flat slot first
  for (const detail::group& g : o.groups) {
    const kernel k = detail::generated(s.dev, detail::unscale_source(g.dtype), "ko_unscale",
                                       std::string("gradient unscale of ") + type_name(g.dtype));
    kiln::detail::arg_binding args[] = {detail::mem_arg(*g.grads, g.dtype, false),
                                        detail::mem_arg(*s.mem, scalar_type::f32, false),
                                        kiln::detail::bind_arg(g.n)};
    kiln::detail::launch(*k.impl(), *q.impl(), range(detail::items_for(s.dev, g.n)), nullptr, args,
                         3);
  }
}

void grad_scaler::unscale_(optimizer& opt) {
  if (!o_.enabled) return;
  scaler_state& s = ready_for(opt, "unscale_");
  const std::weak_ptr<const void> id = opt.impl();
  for (const auto& u : s.unscaled_since_update)
    if (detail::same_owner(u, id))
      throw invalid_argument(
          "kiln::optim::grad_scaler::unscale_: already called for this optimizer since the last "
          "update() (its gradients are unscaled)");
  unscale(opt);
  s.unscaled = id;
  s.unscaled_since_update.push_back(id);
  s.stepped_since_update = true;  // update() backs off for an overflow it found
}

grad_scaler::step_result grad_scaler::step(optimizer& opt) {
  step_result r;
  if (!o_.enabled) {
    opt.step();
    return r;  // no state: converts to true
  }
  scaler_state& s = ready_for(opt, "step");
  detail::optimizer_impl& o = detail::impl_of(opt.impl());
  ++s.steps;
  s.stepped_since_update = true;
  if (s.unscaled.expired()) unscale(opt);  // else unscale_(opt) did
  detail::step_all(o, s.mem.get());        // skipped on the device when found_inf is up
  // Cleared once stepped: a step that threw leaves the gradients unscaled, and a retry must not
  // unscale them again.
  s.unscaled.reset();
  r.state_ = state_;
  r.step_ = s.steps;
  return r;
}

void grad_scaler::update() {
  if (!o_.enabled || !state_ || !state_->stepped_since_update) return;
  scaler_state& s = *state_;
  s.stepped_since_update = false;
  s.unscaled.reset();
  s.unscaled_since_update.clear();
  const kernel k =
      detail::generated(s.dev, detail::update_source, "ko_scaler_update", "grad_scaler update");
  kiln::detail::arg_binding args[] = {
      detail::mem_arg(*s.mem, scalar_type::f32, false),
      kiln::detail::bind_arg(static_cast<float>(o_.growth_factor)),
      kiln::detail::bind_arg(static_cast<float>(o_.backoff_factor)),
      kiln::detail::bind_arg(static_cast<float>(o_.growth_interval))};
  kiln::detail::launch(*k.impl(), *s.dev.default_queue().impl(), range(1), nullptr, args, 4);
}

double grad_scaler::get_scale() const { return state_ ? detail::read(*state_, 1) : o_.init_scale; }

bool grad_scaler::last_step_skipped() const {
  return state_ && state_->steps > 0 && detail::read(*state_, 0) != 0;
}

grad_scaler::step_result::operator bool() const {
  if (!state_) return true;
  if (state_->steps != step_)
    throw invalid_argument(
        "kiln::optim::grad_scaler::step_result: read after a later step() of its scaler (use "
        "last_step_skipped() for the latest)");
  return detail::read(*state_, 0) == 0;
}

}  // namespace kiln::optim
