// Recording: grad modes, autograd::record, and the tensor members that read or mark the graph.
#include "autograd/graph.hpp"

#include <algorithm>
#include <atomic>

#include "kiln/tensor/inplace.hpp"
#include "tensor/build.hpp"
#include "tensor/promote.hpp"
#include "tensor/shape.hpp"

namespace kiln {
namespace {
thread_local bool t_grad_enabled = true;
}

bool is_grad_enabled() { return t_grad_enabled; }
no_grad::no_grad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
no_grad::~no_grad() { t_grad_enabled = previous_; }
enable_grad::enable_grad() : previous_(t_grad_enabled) { t_grad_enabled = true; }
enable_grad::~enable_grad() { t_grad_enabled = previous_; }

namespace detail {

bool grad_wanted(std::initializer_list<const tensor*> xs) {
  if (!t_grad_enabled) return false;
  for (const tensor* x : xs)
    if (needs_grad(x->impl().get())) return true;
  return false;
}

void refuse_in_place(const char* fn, std::initializer_list<const tensor*> xs) {
  if (grad_wanted(xs))
    throw invalid_argument(std::string("kiln::") + fn +
                           " writes in place, which autograd does not record, and an operand "
                           "requires a gradient: run it under kiln::no_grad, or on detach()ed "
                           "tensors");
}

namespace {
grad_meta& meta_of(tensor_impl& x) {
  if (!x.ag) x.ag = std::make_shared<grad_meta>();
  return *x.ag;
}
}  // namespace

std::uint64_t add_hook(const tensor& leaf, autograd::post_accumulate_hook fn, bool gradient_only) {
  tensor_impl& x = impl_of(leaf, "register_post_accumulate_hook");
  if (!x.ag || !x.ag->requires_grad || x.ag->fn)
    throw invalid_argument(
        "kiln::autograd::register_post_accumulate_hook: the tensor is not a leaf marked "
        "requires_grad_");
  if (!fn)
    throw invalid_argument("kiln::autograd::register_post_accumulate_hook: the hook is empty");
  static std::atomic<std::uint64_t> next{1};
  const std::uint64_t id = next++;
  x.ag->post_accumulate.push_back({id, std::move(fn), gradient_only});
  return id;
}

std::uint64_t register_gradient_only_hook(const tensor& leaf, autograd::post_accumulate_hook fn) {
  return add_hook(leaf, std::move(fn), true);
}

bool early_delivery_safe(const tensor_impl& leaf) {
  if (!leaf.ag) return true;
  return std::all_of(leaf.ag->post_accumulate.begin(), leaf.ag->post_accumulate.end(),
                     [](const grad_meta::hook& h) { return h.gradient_only; });
}

}  // namespace detail

namespace autograd {

tensor record(const std::string& name, const tensor& output, const std::vector<tensor>& inputs,
              backward_fn backward) {
  detail::tensor_impl& out = detail::impl_of(output, "autograd::record");
  if (!t_grad_enabled) return output;
  auto n = std::make_shared<detail::grad_node>();
  bool any = false;
  for (const tensor& x : inputs) {
    const bool need = detail::needs_grad(x.impl().get());
    n->inputs.push_back(need ? x.impl() : nullptr);
    any = any || need;
  }
  if (!any) return output;
  if (!detail::is_floating(out.dtype))
    throw dtype_error("kiln::autograd::record: " + name + " gives " +
                      std::string(type_name(out.dtype)) + ", which has no gradient");
  n->name = name;
  n->backward = std::move(backward);
  // A result that already takes part (an op returning an input unchanged) gets a new handle,
  // so the input's own place in the graph is kept.
  if (out.ag || out.kind == detail::tensor_kind::scalar) {
    tensor alias = detail::copy_node(output);
    detail::meta_of(*alias.impl()).fn = std::move(n);
    return alias;
  }
  detail::meta_of(out).fn = std::move(n);
  return output;
}

tensor sum_to(const tensor& g, const std::vector<std::int64_t>& shape) {
  const shape_t& gs = g.shape();
  if (gs == shape) return g;
  if (gs.size() < shape.size())
    throw shape_error("kiln::autograd::sum_to: " + to_string(gs) + " cannot sum to " +
                      to_string(shape));
  const std::size_t lead = gs.size() - shape.size();
  std::vector<int> ax;
  for (std::size_t k = 0; k < gs.size(); ++k)
    if (k < lead || (shape[k - lead] == 1 && gs[k] != 1)) ax.push_back(static_cast<int>(k));
  if (ax.empty()) return g;
  return g.sum(axes(ax), true).reshape(shape);
}

std::uint64_t register_post_accumulate_hook(const tensor& leaf, post_accumulate_hook fn) {
  return detail::add_hook(leaf, std::move(fn), false);
}

void remove_hook(const tensor& leaf, std::uint64_t id) {
  detail::tensor_impl& x = detail::impl_of(leaf, "remove_hook");
  if (x.ag) std::erase_if(x.ag->post_accumulate, [&](const auto& h) { return h.id == id; });
}

}  // namespace autograd

tensor& tensor::requires_grad_(bool on) {
  detail::tensor_impl& x = detail::impl_of(*this, "requires_grad_");
  if (x.ag && x.ag->fn)
    throw invalid_argument(
        "kiln::tensor::requires_grad_: only leaves can be marked; this tensor is the result of " +
        x.ag->fn->name + " (use detach() for a new leaf)");
  if (on && !detail::is_floating(x.dtype))
    throw dtype_error(std::string("kiln::tensor::requires_grad_: only floating-point tensors "
                                  "have gradients, not ") +
                      type_name(x.dtype));
  if (on || x.ag) detail::meta_of(x).requires_grad = on;
  return *this;
}

bool tensor::requires_grad() const {
  return detail::needs_grad(&detail::impl_of(*this, "requires_grad"));
}

bool tensor::is_leaf() const {
  const detail::tensor_impl& x = detail::impl_of(*this, "is_leaf");
  return !(x.ag && x.ag->fn);
}

tensor tensor::grad() const {
  const detail::tensor_impl& x = detail::impl_of(*this, "grad");
  return x.ag ? x.ag->grad : tensor();
}

void tensor::set_grad(const tensor& g) const {
  detail::tensor_impl& x = detail::impl_of(*this, "set_grad");
  if (g.defined() && (g.shape() != x.shape || g.dtype() != x.dtype))
    throw shape_error("kiln::tensor::set_grad: the gradient is " + to_string(g.shape()) + " " +
                      type_name(g.dtype()) + ", the tensor " + to_string(x.shape) + " " +
                      type_name(x.dtype));
  if (g.defined() && !(g.get_device() == x.dev) && !g.is_automatic() && !x.automatic)
    throw device_mismatch("kiln::tensor::set_grad: the gradient is on " + g.get_device().id() +
                          ", the tensor on " + x.dev.id());
  if (!g.defined() && !x.ag) return;
  detail::meta_of(x).grad = g;
}

void tensor::retain_grad() const {
  detail::tensor_impl& x = detail::impl_of(*this, "retain_grad");
  if (!detail::needs_grad(&x))
    throw invalid_argument("kiln::tensor::retain_grad: the tensor does not require a gradient");
  x.ag->retain = true;
}

tensor tensor::detach() const {
  detail::tensor_impl& x = detail::impl_of(*this, "detach");
  if (x.kind == detail::tensor_kind::scalar)
    return tensor(detail::scalar_of(x.dev, x.dtype, x.value.bits));
  detail::materialise(x);
  auto v = detail::share_storage(x);
  v->automatic = x.automatic;
  return tensor(std::move(v));
}

}  // namespace kiln
