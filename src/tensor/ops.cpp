// Lazy elementwise operations: each records one node (plus the casts promotion asks for) and
// returns at once; tensor/eval.cpp renders and runs the whole expression when it is read.
#include <cmath>

#include "autograd/derivatives.hpp"
#include "tensor/build.hpp"
#include "tensor/convert.hpp"
#include "tensor/promote.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

impl_ptr node(ir::op o, scalar_type t, const shape_t& shape, std::vector<impl_ptr> args) {
  auto n = std::make_shared<tensor_impl>();
  n->dev = args.at(0)->dev;
  // kiln::automatic (docs/placement.md): scalars take no part; a fixed operand pins the node
  // to its device (two fixed ones must agree); else the node is automatic when an operand is.
  const tensor_impl* fixed = nullptr;
  for (const impl_ptr& a : args) {
    if (a->kind == tensor_kind::scalar) continue;
    if (a->automatic) {
      n->automatic = true;
    } else if (!fixed) {
      fixed = a.get();
    } else {
      same_device(*fixed, *a);
    }
  }
  if (fixed) {
    n->dev = fixed->dev;
    n->automatic = false;
  }
  n->dtype = t;
  n->shape = shape;
  n->kind = tensor_kind::op;
  n->o = o;
  n->args = std::move(args);
  return n;
}

impl_ptr scalar_of(const device& dev, scalar_type t, std::uint64_t bits) {
  auto s = std::make_shared<tensor_impl>();
  s->dev = dev;
  s->dtype = t;
  s->kind = tensor_kind::scalar;
  s->value = {t, bits};
  return s;
}

// x as dtype t: itself, a converted scalar (no node), or a cast node.
impl_ptr cast_to(const impl_ptr& x, scalar_type t) {
  if (x->dtype == t) return x;
  if (x->kind == tensor_kind::scalar)
    return scalar_of(x->dev, t, convert_bits(x->dtype, x->value.bits, t));
  return node(ir::op::cast, t, x->shape, {x});
}

impl_ptr checked(const tensor& t, const char* what) {
  impl_of(t, what);
  return t.impl();
}

void same_device(const tensor_impl& a, const tensor_impl& b) {
  // An automatic tensor follows the other operand (node() and tensor/placement.cpp).
  if (a.automatic || b.automatic) return;
  if (!(a.dev == b.dev))
    throw device_mismatch("kiln::tensor: operands are on different devices: " + a.dev.id() +
                          " and " + b.dev.id());
}

namespace {

ir::op ir_of(binary_op o) {
  constexpr ir::op table[] = {ir::op::add, ir::op::sub, ir::op::mul, ir::op::div, ir::op::lt,
                              ir::op::le,  ir::op::gt,  ir::op::ge,  ir::op::eq,  ir::op::ne};
  return table[static_cast<int>(o)];
}

}  // namespace

tensor scalar_like(const tensor& like, scalar_type t, std::uint64_t bits) {
  return tensor(scalar_of(impl_of(like, "operator").dev, t, bits));
}

tensor binary(binary_op o, const tensor& a, const tensor& b) {
  const impl_ptr x = checked(a, "operator"), y = checked(b, "operator");
  same_device(*x, *y);
  const shape_t shape = broadcast_shapes(x->shape, y->shape);
  const scalar_type c = promote(x->dtype, y->dtype);
  const ir::op op = ir_of(o);
  const bool compare = ir::info(op).cls == ir::op_class::compare;
  const tensor r(
      node(op, compare ? scalar_type::boolean : c, shape, {cast_to(x, c), cast_to(y, c)}));
  return !compare && grad_wanted({&a, &b}) ? grad::binary(o, a, b, r) : r;
}

namespace {
tensor unary_forward(unary_op o, const tensor& a) {
  const impl_ptr x = checked(a, "operator");
  switch (o) {
    case unary_op::neg:
    case unary_op::abs: {
      const scalar_type t = integral_promote(x->dtype);
      return tensor(
          node(o == unary_op::neg ? ir::op::neg : ir::op::abs, t, x->shape, {cast_to(x, t)}));
    }
    case unary_op::relu:
      return tensor(node(ir::op::max, x->dtype, x->shape, {x, scalar_of(x->dev, x->dtype, 0)}));
    case unary_op::sigmoid: {
      const scalar_type t = math_type(x->dtype);
      const impl_ptr one = scalar_of(x->dev, t, convert_bits(scalar_type::i32, 1, t));
      const impl_ptr e =
          node(ir::op::exp, t, x->shape, {node(ir::op::neg, t, x->shape, {cast_to(x, t)})});
      return tensor(
          node(ir::op::div, t, x->shape, {one, node(ir::op::add, t, x->shape, {one, e})}));
    }
    default: break;
  }
  constexpr ir::op math[] = {ir::op::sqrt, ir::op::exp, ir::op::log,
                             ir::op::sin,  ir::op::cos, ir::op::tanh};
  const ir::op op = math[static_cast<int>(o) - static_cast<int>(unary_op::sqrt)];
  const scalar_type t = math_type(x->dtype);
  return tensor(node(op, t, x->shape, {cast_to(x, t)}));
}
}  // namespace

tensor unary(unary_op o, const tensor& a) {
  const tensor r = unary_forward(o, a);
  return grad_wanted({&a}) ? grad::unary(o, a, r) : r;
}

tensor clamp_bits(const tensor& a, scalar_type from, std::uint64_t lo, std::uint64_t hi) {
  const impl_ptr x = checked(a, "clamp");
  const scalar_type t = x->dtype;
  const tensor r(node(ir::op::clamp, t, x->shape,
                      {x, scalar_of(x->dev, t, convert_bits(from, lo, t)),
                       scalar_of(x->dev, t, convert_bits(from, hi, t))}));
  return grad_wanted({&a}) ? grad::clamp(a, r) : r;
}

// A copy through the generated kernel: a cast to the tensor's own dtype.
tensor copy_node(const tensor& a) {
  const impl_ptr x = checked(a, "contiguous");
  return tensor(node(ir::op::cast, x->dtype, x->shape, {x}));
}

}  // namespace kiln::detail

namespace kiln {

tensor where(const tensor& cond, const tensor& a, const tensor& b) {
  using namespace detail;
  const impl_ptr c = checked(cond, "where"), x = checked(a, "where"), y = checked(b, "where");
  same_device(*c, *x);
  same_device(*x, *y);
  const shape_t shape = broadcast_shapes(broadcast_shapes(c->shape, x->shape), y->shape);
  const scalar_type t = promote(x->dtype, y->dtype);
  const tensor r(node(ir::op::select, t, shape, {c, cast_to(x, t), cast_to(y, t)}));
  return grad_wanted({&a, &b}) ? grad::where(cond, a, b, r) : r;
}

tensor tensor::to(scalar_type dtype) const {
  const auto x = detail::checked(*this, "to");
  const tensor r(detail::cast_to(x, dtype));
  if (!detail::grad_wanted({this}) || !detail::is_floating(dtype)) return r;
  return detail::grad::math1("to", *this, r);
}

tensor tensor::arange(const device& dev, double start, double end, double step, scalar_type dtype) {
  using namespace detail;
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw invalid_argument("kiln::tensor::arange: step must be non-zero and bounds finite");
  const double count = std::ceil((end - start) / step);
  if (!(count < 0x1p63))  // the cast below would be undefined (it gave INT64_MIN)
    throw invalid_argument("kiln::tensor::arange: " + std::to_string(count) +
                           " elements, more than an int64 counts");
  const shape_t shape{count > 0 ? static_cast<std::int64_t>(count) : 0};
  auto index = std::make_shared<tensor_impl>();
  index->dev = dev;
  index->dtype = scalar_type::i64;
  index->shape = shape;
  index->kind = tensor_kind::op;
  index->o = ir::op::index;  // the output position: valid only as the whole expression's shape
  const tensor i(std::move(index));
  // Evaluated at once (one kernel): the index leaf must not meet another shape lazily.
  reset_stats();
  tensor r =
      is_floating(dtype)
          ? (i.to(scalar_type::f64) * step + start).to(dtype)
          : (i * static_cast<std::int64_t>(step) + static_cast<std::int64_t>(start)).to(dtype);
  if (!r.is_lazy()) r = copy_node(r);
  materialise(*r.impl());
  return r;
}

}  // namespace kiln
