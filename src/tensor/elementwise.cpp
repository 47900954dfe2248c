// More lazy elementwise math: tan, rsqrt, square, floor, ceil, gelu, pow, minimum, maximum.
// Each records IR nodes (tensor/build.hpp) and returns at once, fusing like the operators.
#include <cmath>
#include <numbers>

#include "autograd/derivatives.hpp"
#include "tensor/build.hpp"
#include "tensor/convert.hpp"
#include "tensor/promote.hpp"
#include "tensor/shape.hpp"

namespace kiln {
namespace {

using detail::impl_ptr;
using detail::node;

// The constant v (a double) as a scalar of dtype t.
impl_ptr constant(const device& dev, scalar_type t, double v) {
  return detail::scalar_of(dev, t, detail::convert_bits(scalar_type::f64, detail::bits_of(v), t));
}

// op on x converted to the math type (float and double kept, integers and bool give double).
tensor math1(ir::op o, const tensor& a, const char* what) {
  const impl_ptr x = detail::checked(a, what);
  const scalar_type t = detail::math_type(x->dtype);
  return tensor(node(o, t, x->shape, {detail::cast_to(x, t)}));
}

// op on a and b broadcast and converted to their common type (math: then to the math type).
tensor binary_fn(ir::op o, const tensor& a, const tensor& b, bool math, const char* what) {
  const impl_ptr x = detail::checked(a, what), y = detail::checked(b, what);
  detail::same_device(*x, *y);
  const shape_t shape = detail::broadcast_shapes(x->shape, y->shape);
  scalar_type t = detail::promote(x->dtype, y->dtype);
  if (math) t = detail::math_type(t);
  return tensor(node(o, t, shape, {detail::cast_to(x, t), detail::cast_to(y, t)}));
}

// floor and ceil: integers have nothing to round (a copy keeps the dtype, as PyTorch does).
tensor rounding(ir::op o, const tensor& a, const char* what) {
  const impl_ptr x = detail::checked(a, what);
  if (!detail::is_floating(x->dtype)) return detail::copy_node(a);
  return tensor(node(o, x->dtype, x->shape, {x}));
}

// The result r of op `name` over a, recorded when a needs a gradient.
tensor recorded1(const char* name, const tensor& a, const tensor& r) {
  return detail::grad_wanted({&a}) ? detail::grad::math1(name, a, r) : r;
}
tensor recorded2(const char* name, const tensor& a, const tensor& b, const tensor& r) {
  return detail::grad_wanted({&a, &b}) ? detail::grad::math2(name, a, b, r) : r;
}

tensor square_forward(const tensor& a) {
  const impl_ptr x = detail::checked(a, "square");
  const impl_ptr y = detail::cast_to(x, detail::integral_promote(x->dtype));
  return tensor(node(ir::op::mul, y->dtype, x->shape, {y, y}));
}

tensor gelu_forward(const tensor& a, const std::string& approximate) {
  const bool exact = approximate == "none";
  if (!exact && approximate != "tanh")
    throw invalid_argument("kiln::gelu: approximate must be \"none\" or \"tanh\", not \"" +
                           approximate + "\"");
  const impl_ptr x0 = detail::checked(a, "gelu");
  const scalar_type t = detail::math_type(x0->dtype);
  const impl_ptr x = detail::cast_to(x0, t);
  const shape_t& s = x->shape;
  const device& dev = x->dev;
  const auto mul = [&](const impl_ptr& p, const impl_ptr& q) {
    return node(ir::op::mul, t, s, {p, q});
  };
  const auto add = [&](const impl_ptr& p, const impl_ptr& q) {
    return node(ir::op::add, t, s, {p, q});
  };
  const impl_ptr one = constant(dev, t, 1), half = constant(dev, t, 0.5);
  if (exact) {  // x * 0.5 * (1 + erf(x * std::numbers::sqrt2 / 2)), PyTorch's order of operations
    const impl_ptr e = node(ir::op::erf, t, s, {mul(x, constant(dev, t, std::numbers::sqrt2 / 2))});
    return tensor(mul(mul(x, half), add(one, e)));
  }
  // 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
  const impl_ptr cube = mul(mul(x, x), x);
  const impl_ptr inner = mul(constant(dev, t, std::numbers::sqrt2 * std::numbers::inv_sqrtpi),
                             add(x, mul(constant(dev, t, 0.044715), cube)));
  return tensor(mul(mul(half, x), add(one, node(ir::op::tanh, t, s, {inner}))));
}

}  // namespace

tensor tan(const tensor& a) { return recorded1("tan", a, math1(ir::op::tan, a, "tan")); }
tensor rsqrt(const tensor& a) { return recorded1("rsqrt", a, math1(ir::op::rsqrt, a, "rsqrt")); }
tensor floor(const tensor& a) { return recorded1("floor", a, rounding(ir::op::floor, a, "floor")); }
tensor ceil(const tensor& a) { return recorded1("ceil", a, rounding(ir::op::ceil, a, "ceil")); }
tensor square(const tensor& a) { return recorded1("square", a, square_forward(a)); }
tensor gelu(const tensor& a, const std::string& approximate) {
  const tensor r = gelu_forward(a, approximate);
  return recorded1(approximate == "none" ? "gelu" : "gelu_tanh", a, r);
}

tensor pow(const tensor& a, const tensor& b) {
  return recorded2("pow", a, b, binary_fn(ir::op::pow, a, b, true, "pow"));
}
tensor minimum(const tensor& a, const tensor& b) {
  return recorded2("minimum", a, b, binary_fn(ir::op::min, a, b, false, "minimum"));
}
tensor maximum(const tensor& a, const tensor& b) {
  return recorded2("maximum", a, b, binary_fn(ir::op::max, a, b, false, "maximum"));
}

}  // namespace kiln
