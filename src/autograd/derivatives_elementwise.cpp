// Gradients of the elementwise operations. Operands promoted to a common type get their
// gradient in that type (the engine converts it back) and summed back to their own shape when
// broadcasting stretched them.
#include <cmath>
#include <numbers>

#include "autograd/derivatives.hpp"
#include "tensor/build.hpp"
#include "tensor/convert.hpp"

namespace kiln::detail::grad {
namespace {

using autograd::sum_to;

tensor zeros_like(const tensor& t) { return tensor::zeros(t.get_device(), t.shape(), t.dtype()); }

// 1 where x > 0, -1 where x < 0, else 0, in x's dtype.
tensor sign(const tensor& x) { return (x > 0).to(x.dtype()) - (x < 0).to(x.dtype()); }

// x as dtype t, not recorded (the op being recorded does the conversion's differentiation).
tensor as(const tensor& x, scalar_type t) {
  return x.dtype() == t ? x : tensor(cast_to(x.impl(), t));
}

tensor erf(const tensor& x) { return tensor(node(ir::op::erf, x.dtype(), x.shape(), {x.impl()})); }

// Which operands want a gradient, fixed when the op is recorded. A gradient nobody takes is
// not even built: summing one back to a broadcast operand's shape evaluates the sum (a reshape
// of it), which for a constant beside attention's scores was a full pass over them per layer.
struct wanted {
  bool a, b;
  wanted(const tensor& x, const tensor& y)
      : a(needs_grad(x.impl().get())), b(needs_grad(y.impl().get())) {}
};

}  // namespace

tensor lit(const tensor& like, double v) {
  const scalar_type t = like.dtype();
  return scalar_like(like, t, convert_bits(scalar_type::f64, bits_of(v), t));
}

tensor binary(binary_op o, const tensor& a, const tensor& b, const tensor& out) {
  if (o >= binary_op::lt) return out;  // comparisons: no gradient
  const char* names[] = {"add", "sub", "mul", "div"};
  const scalar_type t = out.dtype();
  const shape_t sa = a.shape(), sb = b.shape();
  const tensor ca = as(a, t), cb = as(b, t);
  const wanted w{a, b};
  return autograd::record(
      names[static_cast<int>(o)], out, {a, b},
      [o, sa, sb, ca, cb, w](const tensor& g, const tensor& y) -> std::vector<tensor> {
        switch (o) {
          case binary_op::add:
            return {w.a ? sum_to(g, sa) : tensor(), w.b ? sum_to(g, sb) : tensor()};
          case binary_op::sub:
            return {w.a ? sum_to(g, sa) : tensor(), w.b ? sum_to(-g, sb) : tensor()};
          case binary_op::mul:
            return {w.a ? sum_to(g * cb, sa) : tensor(), w.b ? sum_to(g * ca, sb) : tensor()};
          default:
            return {w.a ? sum_to(g / cb, sa) : tensor(), w.b ? sum_to(-g * y / cb, sb) : tensor()};
        }
      });
}

tensor unary(unary_op o, const tensor& a, const tensor& out) {
  const char* names[] = {"neg", "abs", "sqrt", "exp",  "log",
                         "sin", "cos", "tanh", "relu", "sigmoid"};
  const tensor x = as(a, out.dtype());
  return autograd::record(names[static_cast<int>(o)], out, {a},
                          [o, x](const tensor& g, const tensor& y) -> std::vector<tensor> {
                            switch (o) {
                              case unary_op::neg: return {-g};
                              case unary_op::abs: return {g * sign(x)};
                              case unary_op::sqrt: return {g / (y * lit(g, 2))};
                              case unary_op::exp: return {g * y};
                              case unary_op::log: return {g / x};
                              case unary_op::sin: return {g * cos(x)};
                              case unary_op::cos: return {-g * sin(x)};
                              case unary_op::tanh: return {g * (lit(g, 1) - y * y)};
                              case unary_op::relu: return {g * (x > 0).to(g.dtype())};
                              default: return {g * y * (lit(g, 1) - y)};  // sigmoid
                            }
                          });
}

tensor math1(const std::string& name, const tensor& a, const tensor& out) {
  const tensor x = as(a, out.dtype());
  return autograd::record(name, out, {a}, [name, x](const tensor& g, const tensor& y) {
    std::vector<tensor> r(1);
    if (name == "tan") {
      r[0] = g * (lit(g, 1) + y * y);
    } else if (name == "rsqrt") {
      r[0] = g * y * y * y * lit(g, -0.5);
    } else if (name == "square") {
      r[0] = g * x * lit(g, 2);
    } else if (name == "floor" || name == "ceil") {
      r[0] = zeros_like(g);
    } else if (name == "to") {
      r[0] = g;                   // the engine converts it to the input's dtype
    } else if (name == "gelu") {  // d/dx x Phi(x) = Phi(x) + x phi(x)
      const double inv_sqrt2pi = std::numbers::inv_sqrtpi / std::numbers::sqrt2;
      const tensor cdf = lit(g, 0.5) * (lit(g, 1) + erf(x * lit(g, std::numbers::sqrt2 / 2)));
      r[0] = g * (cdf + x * exp(x * x * lit(g, -0.5)) * lit(g, inv_sqrt2pi));
    } else {  // gelu_tanh: 0.5 x (1 + tanh(u)), u = k (x + c x^3)
      const double k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, c = 0.044715;
      const tensor th = tanh(lit(g, k) * (x + lit(g, c) * x * x * x));
      const tensor du = lit(g, k) * (lit(g, 1) + lit(g, 3 * c) * x * x);
      r[0] = g * (lit(g, 0.5) * (lit(g, 1) + th) + lit(g, 0.5) * x * (lit(g, 1) - th * th) * du);
    }
    return r;
  });
}

tensor math2(const std::string& name, const tensor& a, const tensor& b, const tensor& out) {
  const scalar_type t = out.dtype();
  const shape_t sa = a.shape(), sb = b.shape();
  const tensor ca = as(a, t), cb = as(b, t);
  const wanted w{a, b};
  return autograd::record(
      name, out, {a, b}, [name, sa, sb, ca, cb, w](const tensor& g, const tensor& y) {
        std::vector<tensor> r(2);
        const scalar_type dt = g.dtype();
        if (name == "pow") {
          if (w.a) r[0] = sum_to(g * cb * pow(ca, cb - lit(g, 1)), sa);
          // d/db a^b = a^b log a; 0 where a == 0 (the limit for b > 0, PyTorch's choice)
          if (w.b) r[1] = sum_to(where(ca == lit(g, 0), lit(g, 0), g * y * log(ca)), sb);
        } else {  // minimum / maximum: the chosen operand gets it, ties split evenly
          const bool mx = name == "maximum";
          const tensor win_a = (mx ? ca > cb : ca < cb).to(dt), tie = (ca == cb).to(dt);
          const tensor share_a = win_a + tie * lit(g, 0.5);
          if (w.a) r[0] = sum_to(g * share_a, sa);
          if (w.b) r[1] = sum_to(g * (lit(g, 1) - share_a), sb);
        }
        return r;
      });
}

tensor where(const tensor& cond, const tensor& a, const tensor& b, const tensor& out) {
  const shape_t sa = a.shape(), sb = b.shape();
  const wanted w{a, b};
  return autograd::record("where", out, {cond, a, b},
                          [cond, sa, sb, w](const tensor& g, const tensor&) -> std::vector<tensor> {
                            const tensor z = lit(g, 0);
                            return {tensor(), w.a ? sum_to(kiln::where(cond, g, z), sa) : tensor(),
                                    w.b ? sum_to(kiln::where(cond, z, g), sb) : tensor()};
                          });
}

tensor clamp(const tensor& x, const tensor& out) {
  return autograd::record("clamp", out, {x},
                          [x](const tensor& g, const tensor& y) -> std::vector<tensor> {
                            return {g * (x == y).to(g.dtype())};
                          });
}

}  // namespace kiln::detail::grad
