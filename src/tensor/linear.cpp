// kiln::linear: the product x w^T with its bias and activation. Where the device's "blas" table
// has gemm_epilogue (cuBLASLt) the tail runs inside the GEMM; everywhere else, and whenever the
// epilogue cannot take the call, it is matmul followed by the tail as one lazy elementwise node
// (which fuses further with whatever consumes it). Both give the same values up to rounding.
#include "kiln/tensor/linear.hpp"

#include <optional>
#include <string>

#include "autograd/graph.hpp"
#include "linalg/linalg.hpp"
#include "tensor/autocast_rules.hpp"
#include "tensor/dnn.hpp"
#include "tensor/fallback.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;

thread_local const char* last_path = "separate";

enum class activation_kind { none, relu, gelu, gelu_tanh };

activation_kind parse(const std::string& s) {
  if (s == "none") return activation_kind::none;
  if (s == "relu") return activation_kind::relu;
  if (s == "gelu") return activation_kind::gelu;
  if (s == "gelu_tanh") return activation_kind::gelu_tanh;
  throw invalid_argument("kiln::linear: unknown activation \"" + s +
                         "\" (none, relu, gelu, gelu_tanh)");
}

tensor apply(const tensor& y, activation_kind a) {
  switch (a) {
    case activation_kind::relu: return relu(y);
    case activation_kind::gelu: return gelu(y);
    case activation_kind::gelu_tanh: return gelu(y, "tanh");
    case activation_kind::none: break;
  }
  return y;
}

// matmul, then bias and activation as one lazy node: also the differentiable form.
tensor separate(const tensor& x, const tensor& w, const tensor& b, activation_kind a,
                const matmul_options& o) {
  last_path = "separate";
  const tensor y = matmul(x, w.t(), o);
  return apply(b.defined() ? y + b : y, a);
}

// The stored tensor itself when it is contiguous, else its contiguous copy.
tensor stored_contiguous(const tensor& t) {
  detail::materialise(*t.impl());
  return t.is_contiguous() ? t : detail::contiguous_of(t);
}

// One vendor GEMM with the bias (and the activation, unless it is the erf GELU, which no
// epilogue computes) applied as it writes; nullopt when the device or library cannot.
std::optional<tensor> fused(const tensor& x, const tensor& w, const tensor& b, activation_kind a,
                            const matmul_options& o) {
  const tensor_impl &xi = *x.impl(), &wi = *w.impl(), &bi = *b.impl();
  if (xi.automatic || wi.automatic || bi.automatic || xi.dtype == scalar_type::f64) return {};
  const kiln_blas_v1* t = linalg::detail::vendor_table(*xi.dev.impl(), xi.dtype);
  const auto fn = linalg::detail::epilogue_of(t);
  const std::int64_t in = w.size(1), out = w.size(0), rows = in ? x.numel() / in : 0;
  if (!fn || rows == 0 || in == 0 || out == 0) return {};
  detail::reset_stats();
  const tensor xc = stored_contiguous(x), bc = stored_contiguous(b);
  detail::materialise(*w.impl());
  // w [out, in] row-major is B^T (trans_b); a transposed w (w.t() of an [in, out]) is B itself.
  tensor wc = w;
  bool trans_b = true;
  std::int64_t ldb = 0;
  if (wi.strides[1] == 1 && wi.strides[0] >= in) {
    ldb = wi.strides[0];
  } else if (wi.strides[0] == 1 && wi.strides[1] >= out) {
    trans_b = false, ldb = wi.strides[1];
  } else {
    wc = detail::contiguous_of(w), ldb = in;
  }
  const tensor_impl& bci = *bc.impl();
  // cuBLASLt reads the bias vectorised: 16-byte aligned, else the separate path.
  if (bci.offset * std::int64_t(size_of(bci.dtype)) % 16) return {};
  shape_t shape = x.shape();
  shape.back() = out;
  auto y = detail::allocate_tensor(xi.dev, shape, xi.dtype);
  const float alpha = 1, beta = 0;
  kiln_blas_gemm_desc d{};
  d.dtype = linalg::detail::dtype_of(xi.dtype);
  d.trans_a = KILN_BLAS_OP_N;
  d.trans_b = trans_b ? KILN_BLAS_OP_T : KILN_BLAS_OP_N;
  d.m = std::uint64_t(rows), d.n = std::uint64_t(out), d.k = std::uint64_t(in);
  d.lda = std::uint64_t(in), d.ldb = std::uint64_t(ldb), d.ldc = std::uint64_t(out);
  d.batch = 1;
  d.alpha = &alpha, d.beta = &beta;
  d.a = detail::dnn_ref(*xc.impl()), d.b = detail::dnn_ref(*wc.impl()), d.c = detail::dnn_ref(*y);
  d.math_mode = o.tf32 ? KILN_BLAS_MATH_TF32 : KILN_BLAS_MATH_DEFAULT;
  kiln_blas_epilogue_desc e{};
  e.epilogue = a == activation_kind::relu        ? KILN_BLAS_EPILOGUE_BIAS_RELU
               : a == activation_kind::gelu_tanh ? KILN_BLAS_EPILOGUE_BIAS_GELU_TANH
                                                 : KILN_BLAS_EPILOGUE_BIAS;
  e.bias = detail::dnn_ref(bci);
  const kiln_status st = fn(xi.dev.default_queue().impl()->handle, &d, &e);
  if (st == KILN_ERR_UNSUPPORTED) return {};
  detail::check(*xi.dev.impl()->api, st, "kiln::linear");
  detail::stats_now().kernel_launches++;
  if (a == activation_kind::gelu) {
    last_path = "bias epilogue";
    return gelu(tensor(y));
  }
  last_path = "epilogue";
  return tensor(y);
}

}  // namespace

tensor linear(const tensor& x0, const tensor& w0, const tensor& b0, const std::string& activation,
              const matmul_options& o) {
  const activation_kind a = parse(activation);
  if (!x0.defined()) throw invalid_argument("kiln::linear: x is undefined");
  if (!w0.defined()) throw invalid_argument("kiln::linear: w is undefined");
  // Inside a kiln::autocast scope the product, and so the bias joining it, are 16-bit.
  const tensor x = detail::autocast_narrow(x0), w = detail::autocast_narrow(w0);
  const tensor b = b0.defined() ? detail::autocast_narrow(b0) : b0;
  if (b.defined())
    detail::check_float_operands("linear", {{"x", &x}, {"w", &w}, {"b", &b}}, true);
  else
    detail::check_float_operands("linear", {{"x", &x}, {"w", &w}}, true);
  if (w.dim() != 2)
    throw shape_error("kiln::linear: w must be 2-D [out, in], got " + to_string(w.shape()));
  if (x.dim() < 1 || x.size(-1) != w.size(1))
    throw shape_error("kiln::linear: x must be [..., " + std::to_string(w.size(1)) + "], got " +
                      to_string(x.shape()));
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0)))
    throw shape_error("kiln::linear: b must be [" + std::to_string(w.size(0)) + "], got " +
                      to_string(b.shape()));
  // Recorded for autograd, or no bias to fuse: the separate form (its backward is matmul's).
  if (!b.defined() || detail::grad_wanted({&x, &w, &b})) return separate(x, w, b, a, o);
  return detail::run_op_falling_back("linear", {x, w, b}, [&](const std::vector<tensor>& v) {
    if (auto y = fused(v[0], v[1], v[2], a, o)) return *y;
    return separate(v[0], v[1], v[2], a, o);
  });
}

const char* last_linear_path() noexcept { return last_path; }

}  // namespace kiln
