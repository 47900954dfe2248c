// Dense linear algebra on any device: GEMM (plain and strided-batched) and GEMV, row-major.
// A vendor library runs it where the device's backend has one (cuBLAS on CUDA, OpenBLAS on
// the CPU); elsewhere a portable tiled kernel does (OpenCL, CPU without OpenBLAS).
//
//   kiln::buffer<float> a(dev, host_a), b(dev, host_b), c(dev, m * n);   // row-major
//   kiln::linalg::gemm(q, a, b, c, {.m = m, .n = n, .k = k});            // C = A B
//   kiln::linalg::gemm(q, a, b, c, {.m = m, .n = n, .k = k, .batch = 8},
//                      {.trans_b = true, .alpha = 2, .beta = 1});        // C[i] = 2 A[i] B[i]^T +
//                      C[i]
//   kiln::linalg::gemv(q, a, x, y, {.m = m, .n = n});                    // y = A x
//   q.finish();
//
// Calls are asynchronous on q. Shapes and buffer sizes are checked before anything is
// queued (kiln::invalid_argument). docs/linalg.md has the tolerances and the TF32 mode.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/buffer.hpp"
#include "kiln/queue.hpp"

namespace kiln::linalg {

// op(A) is m x k, op(B) is k x n, C is m x n, all row-major. A 0 leading dimension or stride
// means tight (the stored matrix's columns; one whole matrix). m, n or batch 0: nothing to do.
struct gemm_shape {
  std::uint64_t m = 0, n = 0, k = 0;
  std::uint64_t lda = 0, ldb = 0, ldc = 0;
  std::uint64_t batch = 1;
  std::uint64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// C = alpha op(A) op(B) + beta C. beta 0: C is only written (it may hold anything, NaN too).
// tf32: f32 products may use TensorFloat-32 (~1e-3 relative); ignored where unsupported.
struct gemm_options {
  bool trans_a = false, trans_b = false;
  double alpha = 1, beta = 0;
  bool tf32 = false;
};

// y = alpha op(A) x + beta y; A is stored m x n (lda 0: n); op(A) is A, or A^T with trans.
struct gemv_shape {
  std::uint64_t m = 0, n = 0, lda = 0;
};
struct gemv_options {
  bool trans = false;
  double alpha = 1, beta = 0;
};

// Which implementation ran this thread's last gemm or gemv: for tests and reports.
enum class path { none, vendor, tiled, simple };  // none: nothing to do (an empty problem)
path last_path() noexcept;
const char* to_string(path p) noexcept;
// What backs the device's "blas" extension ("OpenBLAS 0.3.21"), or "" when it has none.
const char* vendor_library(const device& dev);

namespace detail {
// A type-erased operand: its allocation, offset and size in elements.
struct operand {
  kiln::detail::memory_impl* mem = nullptr;
  std::uint64_t offset = 0, size = 0;
};
template <class X>
operand operand_of(const X& x) {
  auto v = kiln::detail::as_view(x);
  return {v.memory().get(), v.offset(), v.size()};
}
template <class X>
using elem_t = std::remove_cv_t<typename kiln::detail::device_side<std::remove_cvref_t<X>>::elem>;
template <class A, class B, class C>
constexpr void check_types() {
  static_assert(kiln::detail::is_device_side<A> && kiln::detail::is_device_side<B> &&
                    kiln::detail::is_device_side<C>,
                "kiln::linalg: operands must be kiln::buffer or kiln::buffer_view");
  static_assert(std::is_same_v<elem_t<A>, elem_t<B>> && std::is_same_v<elem_t<A>, elem_t<C>>,
                "kiln::linalg: all operands must have one element type");
  static_assert(std::is_same_v<elem_t<A>, float> || std::is_same_v<elem_t<A>, double> ||
                    std::is_same_v<elem_t<A>, half> || std::is_same_v<elem_t<A>, bfloat16>,
                "kiln::linalg: only float, double, half and bfloat16 are supported");
  static_assert(!std::is_const_v<typename kiln::detail::device_side<std::remove_cvref_t<C>>::elem>,
                "kiln::linalg: the output (C, y) must be writable, not a view of const");
}
void gemm(queue& q, scalar_type t, operand a, operand b, operand c, const gemm_shape& s,
          const gemm_options& o);
void gemv(queue& q, scalar_type t, operand a, operand x, operand y, const gemv_shape& s,
          const gemv_options& o);
}  // namespace detail

// A, B: buffers or views of float, double, half or bfloat16; C: a writable one of the same
// type. half and bfloat16 accumulate in float (tensor cores through cuBLAS on CUDA); alpha and
// beta are applied in float.
template <class A, class B, class C>
void gemm(queue& q, const A& a, const B& b, const C& c, const gemm_shape& s,
          const gemm_options& o = {}) {
  detail::check_types<A, B, C>();
  detail::gemm(q, scalar_type_of<detail::elem_t<A>>, detail::operand_of(a), detail::operand_of(b),
               detail::operand_of(c), s, o);
}

template <class A, class X, class Y>
void gemv(queue& q, const A& a, const X& x, const Y& y, const gemv_shape& s,
          const gemv_options& o = {}) {
  detail::check_types<A, X, Y>();
  detail::gemv(q, scalar_type_of<detail::elem_t<A>>, detail::operand_of(a), detail::operand_of(x),
               detail::operand_of(y), s, o);
}

}  // namespace kiln::linalg
