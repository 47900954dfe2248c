// kiln::linalg::gemv: validates, then runs the device's "blas" extension when it has one, else
// the portable kernel (one work-item per element of y).
#include <algorithm>
#include <string>

#include "linalg/linalg.hpp"

namespace kiln::linalg::detail {

void gemv(queue& q, scalar_type ty, operand a, operand x, operand y, const gemv_shape& s,
          const gemv_options& o) {
  if (!q.impl()) kiln::detail::throw_empty_handle("kiln::linalg::gemv", "queue");
  kiln::detail::queue_impl& qi = *q.impl();
  check_devices(qi, "gemv", {a, x, y}, "Axy");
  const std::uint64_t lda = s.lda ? s.lda : std::max<std::uint64_t>(s.n, 1);
  if (lda < s.n)
    throw invalid_argument("kiln::linalg::gemv: lda (" + std::to_string(lda) +
                           ") is smaller than a row of A (" + std::to_string(s.n) + " elements)");
  const std::uint64_t in = o.trans ? s.m : s.n, out = o.trans ? s.n : s.m;
  const std::string shape = std::to_string(s.m) + " x " + std::to_string(s.n) + ", lda " +
                            std::to_string(lda) + (o.trans ? ", transposed" : "");
  check_size(a, span_of(1, 0, s.m, s.n, lda, "A"), "gemv", "A", shape);
  check_size(x, in, "gemv", "x", shape);
  check_size(y, out, "gemv", "y", shape);
  if (out == 0) return set_path(path::none);

  // An empty A is y = beta y, which vendor libraries disagree on: the portable kernel does it.
  // The 16-bit floats go to the table only where it says its gemv takes them (the CPU's).
  const bool table_takes = !is_reduced_float(ty) || qi.dev->supports_op(KILN_OP_GEMV, dtype_of(ty));
  const kiln_blas_v1* vendor = in && table_takes ? vendor_table(*qi.dev, ty) : nullptr;
  if (vendor) {
    const float af = float(o.alpha), bf = float(o.beta);  // f32, f16 and bf16
    const bool f64 = ty == scalar_type::f64;
    kiln_blas_gemv_desc d{};
    d.dtype = dtype_of(ty);
    d.trans = o.trans ? KILN_BLAS_OP_T : KILN_BLAS_OP_N;
    d.m = s.m, d.n = s.n, d.lda = lda;
    d.alpha = f64 ? static_cast<const void*>(&o.alpha) : &af;
    d.beta = f64 ? static_cast<const void*>(&o.beta) : &bf;
    d.a = mem_ref(qi, a, ty), d.x = mem_ref(qi, x, ty), d.y = mem_ref(qi, y, ty);
    kiln::detail::check(*qi.dev->api, vendor->gemv(qi.handle, &d), "kiln::linalg::gemv");
    return set_path(path::vendor);
  }
  const program prog = program::compile(q.get_device(), simple_source(ty), {}, check_mode::off);
  const kernel k = prog.get_kernel("kiln_gemv");
  auto scalar = [](auto v) { return kiln::detail::bind_arg(v); };
  auto real = [&](double v) { return ty == scalar_type::f64 ? scalar(v) : scalar(float(v)); };
  // An empty A or x (in = 0) is never read, but launches refuse buffers without memory: y
  // stands in for it.
  auto input = [&](const operand& v) { return mem_arg(v.mem ? v : y, ty, 0, true); };
  kiln::detail::arg_binding args[] = {mem_arg(y, ty, 0, false),
                                      input(a),
                                      input(x),
                                      scalar(s.m),
                                      scalar(s.n),
                                      scalar(lda),
                                      scalar(std::int32_t(o.trans)),
                                      real(o.alpha),
                                      real(o.beta)};
  kiln::detail::launch(*k.impl(), qi, range(out), nullptr, args, std::size(args));
  set_path(path::simple);
}

}  // namespace kiln::linalg::detail
