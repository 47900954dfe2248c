// 2-D transposes as generated kernels (cache "tensor_transpose", keyed by dtype and variant):
// out of place through a 16 x 16 local-memory tile (17 wide, so the column reads of the tile
// fall in distinct banks) on devices with barriers, a strided copy on the CPU backend (no
// barriers there); in place by swapping across the diagonal.
#include "tensor/transpose.hpp"

#include <string>

#include "autograd/graph.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/kernel.hpp"
#include "kiln/tensor/linalg.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/runtime.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;
constexpr std::uint64_t side = 16;

using variant = detail::transpose_variant;

// out (cols x rows, contiguous) = in^T; in is rows x cols at strides s0, s1. The launch is
// rounded up to whole 16 x 16 groups (barriers need them), so items check the bounds.
constexpr const char* tiled_text = R"(
KILN_KERNEL void kt_transpose(KILN_GLOBAL T_* KILN_RESTRICT out, KILN_GLOBAL const T_* KILN_RESTRICT in,
                              int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  KILN_LOCAL T_ tile[16 * 17];
  const int64_t tx = (int64_t)kiln_local_id(0), ty = (int64_t)kiln_local_id(1);
  const int64_t c0 = (int64_t)kiln_group_id(0) * 16, r0 = (int64_t)kiln_group_id(1) * 16;
  if (r0 + ty < rows && c0 + tx < cols) tile[ty * 17 + tx] = in[(r0 + ty) * s0 + (c0 + tx) * s1];
  kiln_barrier();
  if (c0 + ty < cols && r0 + tx < rows) out[(c0 + ty) * rows + r0 + tx] = tile[tx * 17 + ty];
}
)";

// One item per output element, over the exact range (cols of out = rows of in, rows of out).
constexpr const char* copy_text = R"(
KILN_KERNEL void kt_transpose(KILN_GLOBAL T_* KILN_RESTRICT out, KILN_GLOBAL const T_* KILN_RESTRICT in,
                              int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  const int64_t r = (int64_t)kiln_global_id(0), c = (int64_t)kiln_global_id(1);
  out[c * rows + r] = in[r * s0 + c * s1];
}
)";

// x (n x n at strides s0, s1) = x^T: the items above the diagonal swap with their mirror.
constexpr const char* swap_text = R"(
KILN_KERNEL void kt_transpose(KILN_GLOBAL T_* x, int64_t n, int64_t s0, int64_t s1) {
  const int64_t j = (int64_t)kiln_global_id(0), i = (int64_t)kiln_global_id(1);
  if (j > i) {
    const T_ v = x[i * s0 + j * s1];
    x[i * s0 + j * s1] = x[j * s0 + i * s1];
    x[j * s0 + i * s1] = v;
  }
}
)";

kernel transpose_kernel(const device& dev, scalar_type t, variant v) {
  ir::hasher h;
  h.add("tensor transpose v1").add(static_cast<std::uint64_t>(t)).add(std::uint64_t(v));
  const detail::generated_kernels g =
      detail::get_generated(dev, "tensor_transpose", h.value(), [&] {
        const char* what = v == variant::tiled  ? "tiled out-of-place transpose"
                           : v == variant::copy ? "strided-copy out-of-place transpose"
                                                : "in-place square transpose";
        return detail::generated_program{detail::transpose_source(t, v),
                                         {"kt_transpose"},
                                         std::string(what) + " of " + type_name(t)};
      });
  if (g.compiled) detail::stats_now().programs_compiled++;
  return g.kernels.at(0);
}

detail::arg_binding mem_arg(const tensor_impl& x, bool is_const) {
  detail::arg_binding b;
  b.is_mem = true;
  b.mem = x.mem.get();
  b.byte_offset = static_cast<std::uint64_t>(x.offset) * size_of(x.dtype);
  b.type = x.dtype;
  b.is_const = is_const;
  return b;
}

tensor_impl& stored_2d(const tensor& x, const char* fn) {
  if (!x.impl()) throw invalid_argument(std::string("kiln::") + fn + ": the tensor is undefined");
  if (x.dim() != 2)
    throw shape_error(std::string("kiln::") + fn + ": expects a 2-D tensor, got shape " +
                      to_string(x.shape()));
  detail::materialise(*x.impl());
  return *x.impl();
}

std::uint64_t round_up(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) + side - 1) / side * side;
}

}  // namespace

std::string detail::transpose_source(scalar_type t, transpose_variant v) {
  return codegen::with_element_type(v == variant::tiled  ? tiled_text
                                    : v == variant::copy ? copy_text
                                                         : swap_text,
                                    type_name(t));
}

namespace {
tensor transpose_copy_forward(const tensor& x) {
  detail::reset_stats();
  const tensor_impl& xi = stored_2d(x, "transpose_copy");
  const std::int64_t rows = xi.shape[0], cols = xi.shape[1];
  auto out = detail::allocate_tensor(xi.dev, {cols, rows}, xi.dtype);
  out->automatic = xi.automatic;  // runs where x is stored
  if (rows == 0 || cols == 0) return tensor(std::move(out));
  const bool tiled = xi.dev.supports(feature::barrier);
  const kernel k = transpose_kernel(xi.dev, xi.dtype, tiled ? variant::tiled : variant::copy);
  detail::arg_binding args[] = {mem_arg(*out, false),
                                mem_arg(xi, true),
                                detail::bind_arg(rows),
                                detail::bind_arg(cols),
                                detail::bind_arg(xi.strides[0]),
                                detail::bind_arg(xi.strides[1])};
  queue& q = xi.dev.default_queue();
  if (tiled) {
    const local_size local(side, side);
    detail::launch(*k.impl(), *q.impl(), range(round_up(cols), round_up(rows)), &local, args,
                   std::size(args));
  } else {
    detail::launch(*k.impl(), *q.impl(),
                   range(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols)),
                   nullptr, args, std::size(args));
  }
  detail::stats_now().kernel_launches++;
  return tensor(std::move(out));
}
}  // namespace

tensor transpose_copy(const tensor& x) {
  const tensor r = transpose_copy_forward(x);
  if (!detail::grad_wanted({&x})) return r;
  return autograd::record(
      "transpose_copy", r, {x},
      [](const tensor& g, const tensor&) -> std::vector<tensor> { return {g.t()}; });
}

tensor transpose_(const tensor& x) {
  detail::reset_stats();
  detail::refuse_in_place("transpose_", {&x});
  const tensor_impl& xi = stored_2d(x, "transpose_");
  const std::int64_t n = xi.shape[0];
  if (xi.shape[1] != n)
    throw shape_error("kiln::transpose_: expects a square matrix, got shape " +
                      to_string(xi.shape) + "; transpose_copy makes a transposed copy");
  // Row- or column-major with a pitch of at least n: no two elements share storage.
  const std::int64_t s0 = xi.strides[0], s1 = xi.strides[1];
  if (n > 1 && !((s1 == 1 && s0 >= n) || (s0 == 1 && s1 >= n)))
    throw invalid_argument("kiln::transpose_: the matrix of shape " + to_string(xi.shape) +
                           " and strides " + to_string(xi.strides) +
                           " is not row- or column-major (its elements may share storage)");
  if (n < 2) return x;
  const kernel k = transpose_kernel(xi.dev, xi.dtype, variant::swap);
  detail::arg_binding args[] = {mem_arg(xi, false), detail::bind_arg(n), detail::bind_arg(s0),
                                detail::bind_arg(s1)};
  queue& q = xi.dev.default_queue();
  detail::launch(*k.impl(), *q.impl(),
                 range(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(n)), nullptr, args,
                 std::size(args));
  detail::stats_now().kernel_launches++;
  return x;
}

}  // namespace kiln
