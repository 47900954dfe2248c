// The optimizer core: parameters grouped by (device, dtype) into flat buffers (values,
// gradients, state), each parameter's storage and grad() re-pointed at its slot, so that
// step() is one kernel per group (and a one-item kernel advancing its step count) and
// zero_grad() one fill per group.
#include <set>
#include <string>

#include "autograd/graph.hpp"
#include "optim/flat.hpp"
#include "optim/optim_impl.hpp"
#include "runtime/runtime.hpp"

namespace kiln::optim {
namespace detail {
namespace {

using kiln::detail::tensor_impl;

// Slots start on 64-element boundaries: aligned, vector-friendly views for every kernel.
constexpr std::int64_t slot_align = 64;

std::string param_text(std::size_t i, const tensor& p) {
  return "parameter " + std::to_string(i) + " (" + to_string(p.shape()) + ")";
}

void check_params(const std::string& fn, const std::vector<tensor>& params) {
  if (params.empty()) throw invalid_argument("kiln::optim::" + fn + ": no parameters");
  std::set<const tensor_impl*> seen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const tensor& p = params[i];
    const std::string what = "kiln::optim::" + fn + ": parameter " + std::to_string(i);
    if (!p.defined()) throw invalid_argument(what + " is undefined");
    if (!p.is_leaf())
      throw invalid_argument(what + " is not a leaf (the result of a recorded operation)");
    if (!p.requires_grad())
      throw invalid_argument(what + " does not require a gradient (call requires_grad_())");
    if (p.is_automatic())
      throw invalid_argument(what +
                             " is kiln::automatic: its storage may move, so it cannot live in "
                             "the optimizer's buffer (create it on a device)");
    const scalar_type t = p.dtype();
    if (t != scalar_type::f32 && t != scalar_type::f64 && !is_reduced_float(t))
      throw dtype_error(what + " is " + type_name(t) +
                        ": optimizers step floating parameters (f32, f64, bf16, f16)");
    if (!seen.insert(p.impl().get()).second) throw invalid_argument(what + " is given twice");
  }
}

std::size_t group_of(std::vector<group>& groups, const tensor_impl& x, bool decay) {
  for (std::size_t k = 0; k < groups.size(); ++k)
    if (groups[k].dev == x.dev && groups[k].dtype == x.dtype && groups[k].decay == decay) return k;
  groups.emplace_back();
  groups.back().dev = x.dev;
  groups.back().dtype = x.dtype;
  groups.back().decay = decay;
  // 16-bit parameters step an f32 master copy: an update below half a 16-bit ulp accumulates
  // there instead of rounding away.
  groups.back().math = is_reduced_float(x.dtype) ? scalar_type::f32 : x.dtype;
  return groups.size() - 1;
}

void allocate_group(group& g, const update_rule& rule) {
  auto alloc = [&](scalar_type t, double value) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(g.n) * size_of(t);
    auto m = kiln::detail::allocate(g.dev, std::max<std::uint64_t>(bytes, 1));
    fill_value(g, t, *m, 0, g.n, value);  // padding between slots too: stepped like the rest
    return m;
  };
  g.params = alloc(g.dtype, 0);
  g.grads = alloc(g.dtype, 0);
  if (g.math != g.dtype) g.master = alloc(g.math, 0);
  for (double v : rule.initial) g.state.push_back(alloc(g.math, v));
  g.steps = kiln::detail::allocate(g.dev, 2 * sizeof(std::int64_t));
  const std::int64_t zero = 0;
  kiln::detail::fill(*g.dev.default_queue().impl(), *g.steps, 0, &zero, sizeof zero, 2);
  g.no_skip = kiln::detail::allocate(g.dev, sizeof(float));
  fill_value(g, scalar_type::f32, *g.no_skip, 0, 1, 0);
}

// The parameter's view of its gradient slot.
std::shared_ptr<tensor_impl> grad_view(const group& g, const tensor_impl& x, std::int64_t off) {
  auto v = std::make_shared<tensor_impl>();
  v->dev = g.dev;
  v->dtype = g.dtype;
  v->shape = x.shape;
  v->mem = g.grads;
  v->strides = kiln::detail::contiguous_strides(x.shape);
  v->offset = off;
  return v;
}

}  // namespace

optimizer make_optimizer(const std::vector<tensor>& params, update_rule rule, double lr,
                         const std::vector<tensor>& no_decay) {
  check_params(rule.name, params);
  std::set<const tensor_impl*> exempt;
  for (std::size_t j = 0; j < no_decay.size(); ++j) {
    const tensor_impl* x = no_decay[j].impl().get();
    bool found = false;
    for (const tensor& p : params) found = found || p.impl().get() == x;
    if (!found)
      throw invalid_argument("kiln::optim::" + rule.name + ": no_weight_decay[" +
                             std::to_string(j) + "] is not one of the parameters");
    exempt.insert(x);
  }
  auto o = std::make_shared<optimizer_impl>();
  o->rule = std::move(rule);
  o->lr = lr;
  o->params = params;
  o->slots.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    tensor_impl& x = *params[i].impl();
    kiln::detail::materialise(x);  // a lazy leaf gets its own storage first
    slot& s = o->slots[i];
    s.group = group_of(o->groups, x, !exempt.count(&x));
    group& g = o->groups[s.group];
    s.offset = (g.n + slot_align - 1) / slot_align * slot_align;
    g.n = s.offset + kiln::detail::numel_of(x.shape);
    g.members.push_back(i);
  }
  for (group& g : o->groups) {
    allocate_group(g, o->rule);
    const auto [step, count] = step_kernel(g.dev, o->rule, g.dtype);
    g.step = step.impl();
    g.count = count.impl();
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const tensor& p = params[i];
    tensor_impl& x = *p.impl();
    slot& s = o->slots[i];
    const group& g = o->groups[s.group];
    write_slot(g, g.dtype, *g.params, s.offset, p);
    if (g.master) write_slot(g, g.math, *g.master, s.offset, p);  // exact: f32 holds 16 bits
    s.grad = grad_view(g, x, s.offset);
    if (const tensor old = p.grad(); old.defined()) write_slot(g, g.dtype, *g.grads, s.offset, old);
    // Re-pointed: every handle sharing this tensor_impl now reads the slot.
    x.mem = g.params;
    x.offset = s.offset;
    x.strides = kiln::detail::contiguous_strides(x.shape);
    p.set_grad(tensor(s.grad));
  }
  return optimizer(std::move(o));
}

void reclaim_grads(optimizer_impl& o, bool copy_values) {
  for (std::size_t i = 0; i < o.params.size(); ++i) {
    const slot& s = o.slots[i];
    const tensor g = o.params[i].grad();
    if (g.impl() == s.grad) continue;
    if (copy_values) {
      const group& grp = o.groups[s.group];
      if (g.defined())
        write_slot(grp, grp.dtype, *grp.grads, s.offset, g);
      else
        fill_value(grp, grp.dtype, *grp.grads, s.offset, o.params[i].numel(), 0);
    }
    o.params[i].set_grad(tensor(s.grad));
  }
}

void step_all(optimizer_impl& o, kiln::detail::memory_impl* skip) {
  kiln::detail::reset_stats();
  for (std::size_t i = 0; i < o.params.size(); ++i) {
    const kiln::detail::tensor_impl& x = *o.params[i].impl();
    const group& g = o.groups[o.slots[i].group];
    if (x.dtype != g.dtype)
      throw dtype_error("kiln::optim::" + o.rule.name + "::step: " + param_text(i, o.params[i]) +
                        " is " + type_name(x.dtype) + ", was " + type_name(g.dtype) +
                        " when the optimizer was made");
    if (x.mem != g.params)
      throw invalid_argument("kiln::optim::" + o.rule.name + "::step: the storage of " +
                             param_text(i, o.params[i]) + " was replaced");
  }
  reclaim_grads(o, true);
  const std::vector<double> values = o.rule.values(o.lr);
  std::vector<double> exempt = values;  // a group without weight decay: its scalars 0
  for (std::size_t k = 0; k < o.rule.scalars.size(); ++k)
    for (const std::string& d : o.rule.decay_scalars)
      if (o.rule.scalars[k] == d) exempt[k] = 0;
  for (const group& g : o.groups) launch_step(o.rule, g, g.decay ? values : exempt, skip);
  // Skipped steps, and steps captured in a graph (each replay advances the count on the
  // device without the host): read back on demand (step_count_of).
  bool captured = false;
  for (const group& g : o.groups)
    captured = captured || g.dev.impl()->capture_active.load(std::memory_order_acquire);
  if (skip || captured)
    o.steps_known = false;
  else if (o.steps_known)
    ++o.steps;
}

std::int64_t step_count_of(optimizer_impl& o) {
  if (o.steps_known) return o.steps;
  const group& g = o.groups.front();
  std::int64_t count = 0;
  queue& q = g.dev.default_queue();
  kiln::detail::copy_d2h(*q.impl(), &count, *g.steps, 0, sizeof count);
  q.finish();
  o.steps = count;
  o.steps_known = true;
  return count;
}

void set_step_count(optimizer_impl& o, std::int64_t steps) {
  for (const group& g : o.groups)
    kiln::detail::fill(*g.dev.default_queue().impl(), *g.steps, 0, &steps, sizeof steps, 2);
  o.steps = steps;
  o.steps_known = true;
}

optimizer_impl& impl_of(const std::shared_ptr<optimizer_impl>& o) {
  if (!o) throw invalid_argument("kiln::optim::optimizer: an empty handle (no optimizer)");
  return *o;
}

void check_option(bool ok, const char* fn, const char* what, const char* must, double v) {
  if (!ok)
    throw invalid_argument(std::string("kiln::optim::") + fn + ": " + what + " must be " + must +
                           ", got " + std::to_string(v));
}

}  // namespace detail

void optimizer::step() { detail::step_all(detail::impl_of(impl_), nullptr); }

void optimizer::zero_grad() {
  detail::optimizer_impl& o = detail::impl_of(impl_);
  kiln::detail::reset_stats();
  detail::reclaim_grads(o, false);
  for (const detail::group& g : o.groups) {
    if (g.n == 0) continue;
    detail::fill_value(g, g.dtype, *g.grads, 0, g.n, 0);
    kiln::detail::stats_now().kernel_launches++;  // one fill: the group's one device operation
  }
}

double optimizer::lr() const { return detail::impl_of(impl_).lr; }

void optimizer::set_lr(double lr) {
  detail::optimizer_impl& o = detail::impl_of(impl_);
  detail::check_option(lr >= 0, o.rule.name.c_str(), "lr", "at least 0", lr);
  o.lr = lr;
}

std::int64_t optimizer::step_count() const { return detail::step_count_of(detail::impl_of(impl_)); }
const std::vector<tensor>& optimizer::parameters() const { return detail::impl_of(impl_).params; }
const std::string& optimizer::name() const { return detail::impl_of(impl_).rule.name; }

}  // namespace kiln::optim
