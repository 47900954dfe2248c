// Creation functions computed by a generated kernel from each element's position: linspace and
// the seeded counter-based random numbers. Each is evaluated at once (one kernel), as arange
// is: the index leaf is the position in the whole expression's output, so it must not be fused
// lazily into an expression of another shape.
#include "tensor/generate.hpp"

#include <cmath>
#include <numbers>

#include "tensor/build.hpp"
#include "tensor/convert.hpp"
#include "tensor/promote.hpp"
#include "tensor/shape.hpp"

namespace kiln {
namespace {

using detail::cast_to;
using detail::impl_ptr;
using detail::node;

// The flat output position (int64) over shape.
impl_ptr index_leaf(const device& dev, const shape_t& shape) {
  auto index = std::make_shared<detail::tensor_impl>();
  index->dev = dev;
  index->dtype = scalar_type::i64;
  index->shape = shape;
  index->kind = detail::tensor_kind::op;
  index->o = ir::op::index;
  return index;
}

template <scalar T>
impl_ptr constant(const device& dev, T v) {
  return detail::scalar_of(dev, scalar_type_of<T>, detail::bits_of(v));
}

tensor evaluate(impl_ptr r) {
  detail::reset_stats();
  detail::materialise(*r);
  return tensor(std::move(r));
}

// Uniform in [0, 1) (open = false) or (0, 1] (open = true, for Box-Muller's log) of dtype t from
// Philox output words w (uint64 words 0 | 1 << 32): f32 from the top 24 bits of word 0, f64 from
// the top 53 bits of the 64-bit w. Integer arithmetic and exact conversions and scalings only,
// so every backend gives the same bits.
impl_ptr uniform(const impl_ptr& w, scalar_type t, bool open) {
  const device& dev = w->dev;
  const shape_t& s = w->shape;
  const bool f32 = t == scalar_type::f32;
  const scalar_type u = f32 ? scalar_type::u32 : scalar_type::u64;
  impl_ptr bits = f32 ? node(ir::op::shr, u, s,
                             {node(ir::op::cast, u, s, {w}), constant(dev, std::uint32_t{8})})
                      : node(ir::op::shr, u, s, {w, constant(dev, std::uint64_t{11})});
  if (open)
    bits = node(ir::op::add, u, s,
                {bits, f32 ? constant(dev, std::uint32_t{1}) : constant(dev, std::uint64_t{1})});
  const impl_ptr scale =
      f32 ? constant(dev, std::ldexp(1.f, -24)) : constant(dev, std::ldexp(1.0, -53));
  return node(ir::op::mul, t, s, {node(ir::op::cast, t, s, {bits}), scale});
}

// Philox words of each element: lo = words 0, 1 and hi = words 2, 3 of Philox4x32-10 with
// counter (i, 0, 0) and key seed.
std::pair<impl_ptr, impl_ptr> philox(const device& dev, const shape_t& shape, std::uint64_t seed,
                                     scalar_type dtype, const char* what) {
  if (!detail::is_floating(dtype))
    throw dtype_error(std::string("kiln::tensor::") + what +
                      ": dtype must be float or double, not " + type_name(dtype));
  detail::check_shape(shape, what);
  const impl_ptr ctr = detail::cast_to(index_leaf(dev, shape), scalar_type::u64);
  const impl_ptr key = constant(dev, seed);
  return {node(ir::op::philox_lo, scalar_type::u64, shape, {ctr, key}),
          node(ir::op::philox_hi, scalar_type::u64, shape, {ctr, key})};
}

}  // namespace

namespace detail {

impl_ptr random_expr(const device& dev, const shape_t& shape, std::uint64_t seed, scalar_type dtype,
                     bool normal) {
  if (is_reduced_float(dtype))  // f16, bf16: the f32 numbers, rounded (as PyTorch's)
    return cast_to(random_expr(dev, shape, seed, scalar_type::f32, normal), dtype);
  const auto [lo, hi] = philox(dev, shape, seed, dtype, normal ? "randn" : "rand");
  if (!normal) return uniform(lo, dtype, false);
  const bool f32 = dtype == scalar_type::f32;
  // Box-Muller: sqrt(-2 log u1) cos(2 pi u2), u1 in (0, 1], u2 in [0, 1). f32 takes u1 from word
  // 0 and u2 from word 1; f64 takes u1 from words 0, 1 and u2 from words 2, 3.
  const impl_ptr u1 = uniform(lo, dtype, true);
  const impl_ptr u2 = f32 ? uniform(node(ir::op::shr, scalar_type::u64, shape,
                                         {lo, constant(dev, std::uint64_t{32})}),
                                    dtype, false)
                          : uniform(hi, dtype, false);
  const impl_ptr minus2 = f32 ? constant(dev, -2.f) : constant(dev, -2.0);
  const impl_ptr two_pi = f32 ? constant(dev, static_cast<float>(2 * std::numbers::pi))
                              : constant(dev, 2 * std::numbers::pi);
  const impl_ptr radius =
      node(ir::op::sqrt, dtype, shape,
           {node(ir::op::mul, dtype, shape, {minus2, node(ir::op::log, dtype, shape, {u1})})});
  const impl_ptr angle =
      node(ir::op::cos, dtype, shape, {node(ir::op::mul, dtype, shape, {two_pi, u2})});
  return node(ir::op::mul, dtype, shape, {radius, angle});
}

impl_ptr linspace_expr(const device& dev, double start, double end, std::int64_t steps,
                       scalar_type dtype) {
  const double step = (end - start) / static_cast<double>(steps - 1);
  const shape_t shape{steps};
  const scalar_type f = scalar_type::f64;
  const impl_ptr i = index_leaf(dev, shape), x = cast_to(i, f);
  const auto mul = [&](const impl_ptr& a, const impl_ptr& b) {
    return node(ir::op::mul, f, shape, {a, b});
  };
  const impl_ptr from_start =
      node(ir::op::add, f, shape, {constant(dev, start), mul(x, constant(dev, step))});
  const impl_ptr back =
      node(ir::op::sub, f, shape, {constant(dev, static_cast<double>(steps - 1)), x});
  const impl_ptr from_end =
      node(ir::op::sub, f, shape, {constant(dev, end), mul(back, constant(dev, step))});
  const impl_ptr first_half =
      node(ir::op::lt, scalar_type::boolean, shape, {i, constant(dev, std::int64_t{steps / 2})});
  return cast_to(node(ir::op::select, f, shape, {first_half, from_start, from_end}), dtype);
}

}  // namespace detail

tensor tensor::rand(const device& dev, const shape_t& shape, std::uint64_t seed,
                    scalar_type dtype) {
  return evaluate(detail::random_expr(dev, shape, seed, dtype, false));
}

tensor tensor::randn(const device& dev, const shape_t& shape, std::uint64_t seed,
                     scalar_type dtype) {
  return evaluate(detail::random_expr(dev, shape, seed, dtype, true));
}

tensor tensor::linspace(const device& dev, double start, double end, std::int64_t steps,
                        scalar_type dtype) {
  if (steps < 0 || !std::isfinite(start) || !std::isfinite(end))
    throw invalid_argument("kiln::tensor::linspace: steps must be >= 0 and the ends finite");
  if (steps <= 1) return full(dev, {steps}, dtype, start);
  return evaluate(detail::linspace_expr(dev, start, end, steps, dtype));
}

}  // namespace kiln
