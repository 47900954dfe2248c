// kiln::linalg::gemm: validates the whole call, then runs the device's "blas" extension when it
// has one, else the portable tiled kernel (devices with barriers) or the per-element one.
#include <algorithm>
#include <string>

#include "linalg/linalg.hpp"

namespace kiln::linalg::detail {
namespace {

// One stored matrix of the call: its operand, its stored shape and pitch, as resolved.
struct matrix {
  const char* name;
  std::uint64_t rows, cols, ld, stride;
};

// Fills in tight leading dimensions and strides, then checks pitch and size.
void resolve(matrix& x, std::uint64_t ld, std::uint64_t stride, std::uint64_t batch,
             const operand& op) {
  x.ld = ld ? ld : std::max<std::uint64_t>(x.cols, 1);
  if (x.ld < x.cols)
    throw invalid_argument(std::string("kiln::linalg::gemm: ld") + char(x.name[0] - 'A' + 'a') +
                           " (" + std::to_string(x.ld) + ") is smaller than a row of " + x.name +
                           " (" + std::to_string(x.cols) + " elements)");
  x.stride = stride ? stride : x.rows * x.ld;
  const std::string shape = std::to_string(x.rows) + " x " + std::to_string(x.cols) + ", ld " +
                            std::to_string(x.ld) + ", batch " + std::to_string(batch) +
                            ", stride " + std::to_string(x.stride);
  check_size(op, span_of(batch, x.stride, x.rows, x.cols, x.ld, x.name), "gemm", x.name, shape);
}

void run_vendor(const kiln_blas_v1& t, kiln::detail::queue_impl& q, scalar_type ty,
                const operand* ops, const matrix* mx, const gemm_shape& s, const gemm_options& o) {
  const float af = float(o.alpha), bf = float(o.beta);
  const bool f64 = ty == scalar_type::f64;
  kiln_blas_gemm_desc d{};
  d.dtype = dtype_of(ty);
  d.trans_a = o.trans_a ? KILN_BLAS_OP_T : KILN_BLAS_OP_N;
  d.trans_b = o.trans_b ? KILN_BLAS_OP_T : KILN_BLAS_OP_N;
  d.m = s.m, d.n = s.n, d.k = s.k, d.batch = s.batch;
  d.lda = mx[0].ld, d.ldb = mx[1].ld, d.ldc = mx[2].ld;
  d.stride_a = mx[0].stride, d.stride_b = mx[1].stride, d.stride_c = mx[2].stride;
  d.alpha = f64 ? static_cast<const void*>(&o.alpha) : &af;
  d.beta = f64 ? static_cast<const void*>(&o.beta) : &bf;
  d.a = mem_ref(q, ops[0], ty), d.b = mem_ref(q, ops[1], ty), d.c = mem_ref(q, ops[2], ty);
  d.math_mode = o.tf32 ? KILN_BLAS_MATH_TF32 : KILN_BLAS_MATH_DEFAULT;
  kiln::detail::check(*q.dev->api, t.gemm(q.handle, &d), "kiln::linalg::gemm");
}

// The portable kernels, launched over batch chunks the device's grid can hold.
void run_portable(queue& q, scalar_type ty, const operand* ops, const matrix* mx,
                  const gemm_shape& s, const gemm_options& o) {
  const device& dev = q.get_device();
  const bool tiled = dev.supports(feature::barrier);
  const program prog =
      program::compile(dev, tiled ? tiled_source(ty) : simple_source(ty), {}, check_mode::off);
  const kernel k = prog.get_kernel(tiled ? "kiln_gemm_tiled" : "kiln_gemm_simple");
  const std::uint64_t grid_z = dev.info().max_groups[2];
  const std::uint64_t chunk = std::min<std::uint64_t>(s.batch, grid_z ? grid_z : 65535);
  for (std::uint64_t b0 = 0; b0 < s.batch; b0 += chunk) {
    const std::uint64_t nb = std::min(chunk, s.batch - b0);
    auto scalar = [](auto v) { return kiln::detail::bind_arg(v); };
    auto real = [&](double v) { return ty == scalar_type::f64 ? scalar(v) : scalar(float(v)); };
    // An empty A or B (k = 0) is never read, but launches refuse buffers without memory: C
    // stands in for it.
    auto input = [&](int i) {
      return ops[i].mem ? mem_arg(ops[i], ty, b0 * mx[i].stride, true)
                        : mem_arg(ops[2], ty, 0, true);
    };
    kiln::detail::arg_binding args[] = {mem_arg(ops[2], ty, b0 * mx[2].stride, false),
                                        input(0),
                                        input(1),
                                        scalar(s.m),
                                        scalar(s.n),
                                        scalar(s.k),
                                        scalar(mx[0].ld),
                                        scalar(mx[1].ld),
                                        scalar(mx[2].ld),
                                        scalar(mx[0].stride),
                                        scalar(mx[1].stride),
                                        scalar(mx[2].stride),
                                        scalar(std::int32_t(o.trans_a)),
                                        scalar(std::int32_t(o.trans_b)),
                                        real(o.alpha),
                                        real(o.beta)};
    if (tiled) {
      const range global((s.n + tile - 1) / tile * group_side, (s.m + tile - 1) / tile * group_side,
                         nb);
      const local_size local(group_side, group_side, 1);
      kiln::detail::launch(*k.impl(), *q.impl(), global, &local, args, std::size(args));
    } else {
      kiln::detail::launch(*k.impl(), *q.impl(), range(s.n, s.m, nb), nullptr, args,
                           std::size(args));
    }
  }
  set_path(tiled ? path::tiled : path::simple);
}

}  // namespace

void gemm(queue& q, scalar_type ty, operand a, operand b, operand c, const gemm_shape& s,
          const gemm_options& o) {
  if (!q.impl()) kiln::detail::throw_empty_handle("kiln::linalg::gemm", "queue");
  kiln::detail::queue_impl& qi = *q.impl();
  check_devices(qi, "gemm", {a, b, c}, "ABC");
  const operand ops[] = {a, b, c};
  matrix mx[] = {{"A", o.trans_a ? s.k : s.m, o.trans_a ? s.m : s.k, 0, 0},
                 {"B", o.trans_b ? s.n : s.k, o.trans_b ? s.k : s.n, 0, 0},
                 {"C", s.m, s.n, 0, 0}};
  resolve(mx[0], s.lda, s.stride_a, s.batch, a);
  resolve(mx[1], s.ldb, s.stride_b, s.batch, b);
  resolve(mx[2], s.ldc, s.stride_c, s.batch, c);
  // Matrices of C may share nothing (the work on them runs in parallel); A and B may overlap.
  const std::uint64_t c_span = span_of(1, 0, s.m, s.n, mx[2].ld, "C");
  if (s.batch > 1 && mx[2].stride < c_span)
    throw invalid_argument("kiln::linalg::gemm: stride_c (" + std::to_string(mx[2].stride) +
                           ") is smaller than one C matrix spans (" + std::to_string(c_span) +
                           " elements): the batch's outputs would overlap");
  if (s.m == 0 || s.n == 0 || s.batch == 0) return set_path(path::none);
  // k == 0 is C = beta C, which vendor libraries disagree on: the portable kernel does it.
  const kiln_blas_v1* vendor = s.k ? vendor_table(*qi.dev, ty) : nullptr;
  if (vendor) {
    run_vendor(*vendor, qi, ty, ops, mx, s, o);
    return set_path(path::vendor);
  }
  run_portable(q, ty, ops, mx, s, o);
}

}  // namespace kiln::linalg::detail
