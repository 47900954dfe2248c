// Reductions along axes and what is built from them (mean, var, std, norm, softmax): each
// records nodes and returns at once; tensor/eval.cpp fuses a reduction with the elementwise
// work before and after it into one kernel (tensor/reduce_kernel.hpp).
#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/derivatives.hpp"
#include "tensor/build.hpp"
#include "tensor/convert.hpp"
#include "tensor/promote.hpp"
#include "tensor/shape.hpp"

namespace kiln::detail {
namespace {

struct reduced_shape {
  std::uint32_t mask = 0;
  shape_t shape;       // the result's
  std::int64_t n = 1;  // elements folded per result
};

reduced_shape reduce_shape(const tensor_impl& x, const axes& a, bool keepdim, const char* what) {
  const int rank = static_cast<int>(x.shape.size());
  reduced_shape r;
  if (a.list.empty()) r.mask = rank ? (1u << rank) - 1 : 0;
  for (int d : a.list) {
    const int k = normalise_axis(d, rank, what);
    if (r.mask >> k & 1u)
      throw axis_error(std::string("kiln::tensor::") + what + ": axis " + std::to_string(d) +
                       " appears more than once");
    r.mask |= 1u << k;
  }
  for (int k = 0; k < rank; ++k) {
    const bool reduced = r.mask >> k & 1u;
    if (reduced) r.n *= x.shape[std::size_t(k)];
    if (!reduced)
      r.shape.push_back(x.shape[std::size_t(k)]);
    else if (keepdim)
      r.shape.push_back(1);
  }
  return r;
}

impl_ptr reduce(ir::op o, const impl_ptr& x, scalar_type acc, const reduced_shape& r) {
  const bool arg = o == ir::op::argmax || o == ir::op::argmin;
  impl_ptr n = node(o, arg ? scalar_type::i64 : acc, r.shape, {cast_to(x, acc)});
  n->axes = r.mask;
  return n;
}

// max, min, argmax, argmin have no identity: no elements is an error.
void need_elements(const tensor_impl& x, const reduced_shape& r, const char* what) {
  if (r.n == 0 && numel_of(r.shape) != 0)
    throw shape_error(std::string("kiln::tensor::") + what + ": reducing the tensor of shape " +
                      to_string(x.shape) + " folds zero elements, and " + what +
                      " has no identity");
}

scalar_type sum_type(scalar_type t) {
  if (is_floating(t)) return t;
  return is_unsigned(t) ? scalar_type::u64 : scalar_type::i64;
}

impl_ptr scalar_double(const device& dev, scalar_type t, double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return scalar_of(dev, t, convert_bits(scalar_type::f64, b, t));
}

impl_ptr unary_node(ir::op o, const impl_ptr& x) { return node(o, x->dtype, x->shape, {x}); }
impl_ptr binary_node(ir::op o, const impl_ptr& a, const impl_ptr& b) {
  return node(o, a->dtype, broadcast_shapes(a->shape, b->shape), {a, b});
}

impl_ptr mean_of(const impl_ptr& x, const axes& a, bool keepdim) {
  const scalar_type t = math_type(x->dtype);
  const reduced_shape r = reduce_shape(*x, a, keepdim, "mean");
  return binary_node(ir::op::div, reduce(ir::op::reduce_sum, cast_to(x, t), t, r),
                     scalar_double(x->dev, t, double(r.n)));
}

impl_ptr var_of(const impl_ptr& x, const axes& a, std::int64_t correction, bool keepdim) {
  const scalar_type t = math_type(x->dtype);
  const impl_ptr xt = cast_to(x, t);
  const impl_ptr d = binary_node(ir::op::sub, xt, mean_of(xt, a, true));
  const reduced_shape r = reduce_shape(*x, a, keepdim, "var");
  const double dof = std::max<double>(double(r.n) - double(correction), 0);
  return binary_node(ir::op::div, reduce(ir::op::reduce_sum, binary_node(ir::op::mul, d, d), t, r),
                     scalar_double(x->dev, t, dof));
}

}  // namespace
}  // namespace kiln::detail

namespace kiln {
using namespace detail;

namespace {
// r, the result of reduction `name` over x, recorded when x needs a gradient.
tensor recorded(const char* name, const tensor& x, const axes& a, bool keepdim,
                std::int64_t correction, const tensor& r) {
  return grad_wanted({&x}) ? grad::reduction(name, x, a, keepdim, correction, r) : r;
}
}  // namespace

tensor tensor::sum(const axes& a, bool keepdim) const {
  const impl_ptr x = checked(*this, "sum");
  return recorded("sum", *this, a, keepdim, 0,
                  tensor(reduce(ir::op::reduce_sum, x, sum_type(x->dtype),
                                reduce_shape(*x, a, keepdim, "sum"))));
}

tensor tensor::mean(const axes& a, bool keepdim) const {
  return recorded("mean", *this, a, keepdim, 0,
                  tensor(mean_of(checked(*this, "mean"), a, keepdim)));
}

#define KILN_TENSOR_EXTREME(name, o)                                  \
  tensor tensor::name(const axes& a, bool keepdim) const {            \
    const impl_ptr x = checked(*this, #name);                         \
    const reduced_shape r = reduce_shape(*x, a, keepdim, #name);      \
    need_elements(*x, r, #name);                                      \
    const tensor out(reduce(ir::op::o, x, x->dtype, r));              \
    return ir::op::o == ir::op::argmax || ir::op::o == ir::op::argmin \
               ? out                                                  \
               : recorded(#name, *this, a, keepdim, 0, out);          \
  }
KILN_TENSOR_EXTREME(max, reduce_max)
KILN_TENSOR_EXTREME(min, reduce_min)
KILN_TENSOR_EXTREME(argmax, argmax)
KILN_TENSOR_EXTREME(argmin, argmin)
#undef KILN_TENSOR_EXTREME

tensor tensor::var(const axes& a, std::int64_t correction, bool keepdim) const {
  return recorded("var", *this, a, keepdim, correction,
                  tensor(var_of(checked(*this, "var"), a, correction, keepdim)));
}

tensor tensor::std(const axes& a, std::int64_t correction, bool keepdim) const {
  return recorded(
      "std", *this, a, keepdim, correction,
      tensor(unary_node(ir::op::sqrt, var_of(checked(*this, "std"), a, correction, keepdim))));
}

namespace detail {
tensor norm_forward(const tensor& self, double p, const axes& a, bool keepdim);
tensor softmax_forward(const tensor& self, int dim, bool log);
}  // namespace detail

tensor tensor::norm(double p, const axes& a, bool keepdim) const {
  const tensor r = norm_forward(*this, p, a, keepdim);
  return grad_wanted({this}) ? grad::norm(*this, p, a, keepdim, r) : r;
}

tensor tensor::softmax(int dim) const {
  const tensor r = softmax_forward(*this, dim, false);
  return grad_wanted({this}) ? grad::softmax(*this, dim, false, r) : r;
}

tensor tensor::log_softmax(int dim) const {
  const tensor r = softmax_forward(*this, dim, true);
  return grad_wanted({this}) ? grad::softmax(*this, dim, true, r) : r;
}

namespace detail {
tensor norm_forward(const tensor& self, double p, const axes& a, bool keepdim) {
  const impl_ptr x0 = checked(self, "norm");
  const scalar_type t = math_type(x0->dtype);
  const impl_ptr x = cast_to(x0, t), ax = unary_node(ir::op::abs, x);
  const reduced_shape r = reduce_shape(*x, a, keepdim, "norm");
  if (std::isinf(p)) {
    need_elements(*x, r, "norm");
    return tensor(reduce(p > 0 ? ir::op::reduce_max : ir::op::reduce_min, ax, t, r));
  }
  if (p == 0) {
    const impl_ptr nz =
        node(ir::op::ne, scalar_type::boolean, x->shape, {x, scalar_double(x->dev, t, 0)});
    return tensor(reduce(ir::op::reduce_sum, cast_to(nz, t), t, r));
  }
  if (p == 1) return tensor(reduce(ir::op::reduce_sum, ax, t, r));
  if (p == 2)
    return tensor(
        unary_node(ir::op::sqrt, reduce(ir::op::reduce_sum, binary_node(ir::op::mul, x, x), t, r)));
  const impl_ptr powed = binary_node(ir::op::pow, ax, scalar_double(x->dev, t, p));
  return tensor(binary_node(ir::op::pow, reduce(ir::op::reduce_sum, powed, t, r),
                            scalar_double(x->dev, t, 1 / p)));
}

// softmax: the row maxima, the sums of exp(x - max) (exp fused into the sum), then the quotient
// (exp recomputed rather than stored); one row kernel where tensor/row_kernel.cpp applies.
tensor softmax_forward(const tensor& self, int dim, bool log) {
  const char* what = log ? "log_softmax" : "softmax";
  const impl_ptr x0 = checked(self, what);
  const impl_ptr x = cast_to(x0, math_type(x0->dtype));
  const reduced_shape r = reduce_shape(*x, dim, true, what);
  if (r.n == 0) return tensor(x);  // nothing along dim: an empty result of x's shape
  if (!log) {
    const impl_ptr e = unary_node(
        ir::op::exp, binary_node(ir::op::sub, x, reduce(ir::op::reduce_max, x, x->dtype, r)));
    return tensor(binary_node(ir::op::div, e, reduce(ir::op::reduce_sum, e, x->dtype, r)));
  }
  const impl_ptr shifted = binary_node(ir::op::sub, x, reduce(ir::op::reduce_max, x, x->dtype, r));
  const impl_ptr lse = unary_node(
      ir::op::log, reduce(ir::op::reduce_sum, unary_node(ir::op::exp, shifted), x->dtype, r));
  return tensor(binary_node(ir::op::sub, shifted, lse));
}

}  // namespace detail
}  // namespace kiln
