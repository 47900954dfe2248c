// conv2d and its backwards: operand checks, then the device's "dnn" extension (cuDNN) when it
// has one, else im2col + GEMM through kiln::linalg (OpenBLAS on the CPU, the portable tiled
// kernel on OpenCL). The portable path unfolds a chunk of images at a time into a column
// matrix ((C R S) x (P Q) per image, bounded in memory), then runs one GEMM per image and
// group; backward data is a GEMM into columns and a gathering col2im, backward filter one
// accumulating GEMM per image and group.
#include "kiln/tensor/conv.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "autograd/derivatives.hpp"
#include "kiln/linalg.hpp"
#include "kiln/tensor/autocast.hpp"
#include "linalg/linalg.hpp"
#include "tensor/autocast_rules.hpp"
#include "tensor/conv_kernels.hpp"
#include "tensor/dnn.hpp"
#include "tensor/fallback.hpp"
#include "tensor/placement.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;
thread_local conv_path last = conv_path::none;

// Column-matrix elements unfolded at once (128 MiB of f32): bounds the scratch memory.
constexpr std::int64_t cols_budget = std::int64_t(1) << 25;

// A convolution's sizes: x [n, c, h, w], weight [k, c / g, r, s], y [n, k, p, q].
struct conv_dims {
  std::int64_t n, c, h, w, k, r, s, p, q, g;
  conv2d_options o;
  std::int64_t cg() const { return c / g; }
  std::int64_t kg() const { return k / g; }
  std::int64_t crs() const { return c * r * s; }
  detail::conv_geometry geometry() const {
    return {c,
            h,
            w,
            r,
            s,
            p,
            q,
            o.stride[0],
            o.stride[1],
            o.padding[0],
            o.padding[1],
            o.dilation[0],
            o.dilation[1]};
  }
};

void check_options(const char* fn, const conv2d_options& o) {
  for (int d = 0; d < 2; ++d)
    if (o.stride[d] < 1 || o.dilation[d] < 1 || o.padding[d] < 0)
      throw invalid_argument(std::string("kiln::") + fn + ": stride " +
                             detail::pair_text(o.stride) + " and dilation " +
                             detail::pair_text(o.dilation) + " must be at least 1 and padding " +
                             detail::pair_text(o.padding) + " at least 0");
  if (o.groups < 1)
    throw invalid_argument(std::string("kiln::") + fn + ": groups is " + std::to_string(o.groups) +
                           "; it must be at least 1");
}

// Checks the shapes of input (rank 4) and weight against each other and computes the output.
conv_dims dims_of(const char* fn, const shape_t& x, const shape_t& wt, const conv2d_options& o) {
  check_options(fn, o);
  const std::string both = "input " + to_string(x) + ", weight " + to_string(wt);
  if (x.size() != 4 || wt.size() != 4)
    throw shape_error(std::string("kiln::") + fn +
                      ": expects a 4-D input [N, C, H, W] and a 4-D weight [K, C / groups, R, S]; "
                      "got " +
                      both);
  conv_dims d{x[0], x[1], x[2], x[3], wt[0], wt[2], wt[3], 0, 0, o.groups, o};
  if (d.c % d.g != 0 || d.k % d.g != 0 || wt[1] * d.g != d.c)
    throw shape_error(std::string("kiln::") + fn + ": with " + std::to_string(d.g) +
                      " group(s) the weight must be [K, C / groups, R, S] with C and K multiples "
                      "of the groups; got " +
                      both);
  if (d.c == 0 || d.k == 0 || d.r == 0 || d.s == 0)
    throw shape_error(std::string("kiln::") + fn + ": no channels or an empty kernel: " + both);
  const auto out = [&](std::int64_t in, int i) {
    return (in + 2 * o.padding[i] - o.dilation[i] * ((i ? d.s : d.r) - 1) - 1) / o.stride[i] + 1;
  };
  d.p = out(d.h, 0);
  d.q = out(d.w, 1);
  if (d.p < 1 || d.q < 1 || d.h + 2 * o.padding[0] < o.dilation[0] * (d.r - 1) + 1 ||
      d.w + 2 * o.padding[1] < o.dilation[1] * (d.s - 1) + 1)
    throw shape_error(std::string("kiln::") + fn + ": the output would be empty: " + both +
                      ", padding " + detail::pair_text(o.padding) + ", dilation " +
                      detail::pair_text(o.dilation) +
                      " (the kernel is larger than the padded input)");
  return d;
}

// The dims of a backward call, checking grad_output against the forward's output.
conv_dims backward_dims(const char* fn, const shape_t& x, const shape_t& wt,
                        const tensor& grad_output, const conv2d_options& o) {
  const conv_dims d = dims_of(fn, x, wt, o);
  const shape_t y{d.n, d.k, d.p, d.q};
  if (grad_output.shape() != y)
    throw shape_error(std::string("kiln::") + fn + ": grad_output is " +
                      to_string(grad_output.shape()) + " but the convolution of input " +
                      to_string(x) + " by weight " + to_string(wt) + " gives " + to_string(y));
  return d;
}

// f16 and bf16 where the device's library has no convolution for them (or refuses the shape):
// computed by the f32 kernels and the result rounded once. (An undefined tensor stays so.)
tensor widened(const tensor& x) { return x.impl() ? x.to(scalar_type::f32) : x; }

// Checked (check_float_operands), evaluated and contiguous operands.
std::vector<tensor> operands(const char* fn,
                             std::initializer_list<std::pair<const char*, const tensor*>> xs) {
  detail::check_float_operands(fn, xs, true);
  std::vector<tensor> out;
  for (const auto& xt : xs) out.push_back(detail::contiguous_of(*xt.second));
  return out;
}

linalg::detail::operand op_of(const tensor_impl& x, std::int64_t skip) {
  const std::uint64_t start = static_cast<std::uint64_t>(x.offset + skip);
  return {x.mem.get(), start, x.mem->bytes / size_of(x.dtype) - start};
}

// Runs the dnn table's call; false when the table refused the configuration (KILN_ERR_UNSUPPORTED).
using dnn_call = kiln_status (*)(kiln_queue_h, const kiln_dnn_conv_desc*);
bool run_dnn(const conv_dims& d, const tensor_impl& x, const tensor_impl& wt, const tensor_impl& y,
             double alpha, double beta, dnn_call call, const char* fn) {
  const float af = float(alpha), bf = float(beta);
  const bool f64 = x.dtype == scalar_type::f64;
  kiln_dnn_conv_desc c{};
  c.dtype = detail::dnn_dtype(x.dtype);
  c.n = d.n, c.c = d.c, c.h = d.h, c.w = d.w, c.k = d.k, c.r = d.r, c.s = d.s, c.p = d.p, c.q = d.q;
  c.stride_h = uint32_t(d.o.stride[0]), c.stride_w = uint32_t(d.o.stride[1]);
  c.pad_h = uint32_t(d.o.padding[0]), c.pad_w = uint32_t(d.o.padding[1]);
  c.dil_h = uint32_t(d.o.dilation[0]), c.dil_w = uint32_t(d.o.dilation[1]);
  c.groups = uint32_t(d.g);
  c.math_mode = d.o.tf32 ? KILN_DNN_MATH_TF32 : KILN_DNN_MATH_DEFAULT;
  c.alpha = f64 ? static_cast<const void*>(&alpha) : &af;
  c.beta = f64 ? static_cast<const void*>(&beta) : &bf;
  c.x = detail::dnn_ref(x), c.wt = detail::dnn_ref(wt), c.y = detail::dnn_ref(y);
  const kiln_status st = call(x.dev.default_queue().impl()->handle, &c);
  if (st == KILN_ERR_UNSUPPORTED) return false;
  detail::check(*x.dev.impl()->api, st, fn);
  detail::stats_now().kernel_launches++;
  last = conv_path::vendor;
  return true;
}

// Unfolds images [n0, n0 + nb) of x into cols: per element on devices with work-groups of
// threads (coalesced stores), per row of Q elsewhere (the CPU).
void im2col(const conv_dims& d, const tensor_impl& x, const tensor_impl& cols, std::int64_t n0,
            std::int64_t nb) {
  const bool rows = !x.dev.supports(feature::barrier);
  const std::int64_t items = nb * d.crs() * d.p * (rows ? 1 : d.q);
  detail::launch_conv(
      x.dev, x.dtype,
      rows ? detail::conv_kernel_kind::im2col_rows : detail::conv_kernel_kind::im2col,
      {detail::tensor_arg(cols, 0, false), detail::tensor_arg(x, n0 * d.c * d.h * d.w, true)},
      d.geometry(), items);
}

// A 1 x 1 convolution with unit stride, no padding and one group is a product per image:
// y[n] (K x HW) = w (K x C) x[n] (C x HW), and its backward data dx[n] = w^T dy[n]. No im2col.
bool pointwise(const conv_dims& d) {
  return d.r == 1 && d.s == 1 && d.g == 1 && d.o.stride == std::array<std::int64_t, 2>{1, 1} &&
         d.o.padding == std::array<std::int64_t, 2>{0, 0};
}

// Runs a pointwise convolution's products as one strided-batched call of the device's "blas"
// table, w broadcast over the images by a batch stride of 0 (which kiln::linalg's API reads as
// "tight", hence the table directly). c[i] = op(w) b[i]: m x n, inner size k. False without a
// table or with KILN_CONV_GEMM=0.
bool run_pointwise(const tensor_impl& w, bool trans_w, const tensor_impl& b, const tensor_impl& c,
                   std::uint64_t m, std::uint64_t n, std::uint64_t k, std::uint64_t batch,
                   bool tf32) {
  const char* env = std::getenv("KILN_CONV_GEMM");
  if (env && std::string_view(env) == "0") return false;
  const kiln_blas_v1* t = linalg::detail::vendor_table(*w.dev.impl(), w.dtype);
  if (!t) return false;
  const bool f64 = w.dtype == scalar_type::f64;
  const double one = 1, zero = 0;
  const float onef = 1, zerof = 0;
  kiln_blas_gemm_desc g{};
  g.dtype = detail::dnn_dtype(w.dtype);
  g.trans_a = trans_w ? KILN_BLAS_OP_T : KILN_BLAS_OP_N;
  g.trans_b = KILN_BLAS_OP_N;
  g.m = m, g.n = n, g.k = k, g.batch = batch;
  g.lda = trans_w ? m : k, g.ldb = n, g.ldc = n;
  g.stride_a = 0, g.stride_b = k * n, g.stride_c = m * n;
  g.alpha = f64 ? static_cast<const void*>(&one) : &onef;
  g.beta = f64 ? static_cast<const void*>(&zero) : &zerof;
  g.a = detail::dnn_ref(w), g.b = detail::dnn_ref(b), g.c = detail::dnn_ref(c);
  g.math_mode = tf32 ? KILN_BLAS_MATH_TF32 : KILN_BLAS_MATH_DEFAULT;
  detail::check(*w.dev.impl()->api, t->gemm(w.dev.default_queue().impl()->handle, &g),
                "kiln::conv2d (pointwise product)");
  detail::stats_now().kernel_launches++;
  last = conv_path::vendor;
  return true;
}

// Images per im2col chunk.
std::int64_t chunk_of(const conv_dims& d) {
  const std::int64_t per = std::max<std::int64_t>(d.crs() * d.p * d.q, 1);
  return std::clamp<std::int64_t>(cols_budget / per, 1, std::max<std::int64_t>(d.n, 1));
}

void gemm(const tensor_impl& a, std::int64_t a_at, const tensor_impl& b, std::int64_t b_at,
          const tensor_impl& c, std::int64_t c_at, std::uint64_t m, std::uint64_t n,
          std::uint64_t k, const linalg::gemm_options& o) {
  queue& q = a.dev.default_queue();
  linalg::detail::gemm(q, a.dtype, op_of(a, a_at), op_of(b, b_at), op_of(c, c_at),
                       {.m = m, .n = n, .k = k}, o);
  if (linalg::last_path() != linalg::path::none) detail::stats_now().kernel_launches++;
}

// Whether any tensor is empty (nothing to compute; outputs are zeros).
bool empty(const conv_dims& d) { return d.n == 0; }

bool parse_batch(const tensor& x, tensor& batched) {
  if (x.impl() && x.dim() == 3) {
    batched = x.unsqueeze(0);
    return true;
  }
  batched = x;
  return false;
}

// The work of a convolution for kiln::automatic: 2 N K P Q (C / groups) R S; 0 when the shapes
// are not a convolution's (the call's own checks then throw).
double conv_flops(const shape_t& x, const shape_t& wt, const conv2d_options& o) {
  try {
    const conv_dims d = dims_of("conv2d", x, wt, o);
    return 2.0 * double(d.n * d.k * d.p * d.q) * double(d.cg() * d.r * d.s);
  } catch (const kiln::error&) {
    return 0;
  }
}

}  // namespace

conv_path last_conv_path() noexcept { return last; }

namespace {
tensor conv2d_forward(const tensor& input, const tensor& weight, const tensor& bias,
                      const conv2d_options& o) {
  detail::reset_stats();
  last = conv_path::none;
  tensor in;
  const bool unbatched = parse_batch(input, in);
  const detail::placed place = detail::place(
      op_class::conv, {input.impl().get(), in.impl().get(), weight.impl().get(), bias.impl().get()},
      in.impl() && weight.impl() ? conv_flops(in.shape(), weight.shape(), o) : 0);
  std::vector<tensor> ops =
      bias.impl() ? operands("conv2d", {{"input", &in}, {"weight", &weight}, {"bias", &bias}})
                  : operands("conv2d", {{"input", &in}, {"weight", &weight}});
  const conv_dims d = dims_of("conv2d", in.shape(), weight.shape(), o);
  if (bias.impl() && bias.shape() != shape_t{d.k})
    throw shape_error("kiln::conv2d: bias must be [K] = [" + std::to_string(d.k) + "]; got " +
                      to_string(bias.shape()) + " for weight " + to_string(weight.shape()));
  const tensor_impl& x = *ops[0].impl();
  const tensor_impl& w = *ops[1].impl();
  auto y = detail::allocate_tensor(x.dev, {d.n, d.k, d.p, d.q}, x.dtype);
  y->automatic = place.automatic;
  const std::uint64_t ku = std::uint64_t(d.k), cu = std::uint64_t(d.c);
  const std::uint64_t pqu = std::uint64_t(d.p * d.q);
  if (!empty(d) && !(pointwise(d) && run_pointwise(w, false, x, *y, ku, pqu, cu, d.n, o.tf32))) {
    const kiln_dnn_v1* t = detail::dnn_table(x.dev, x.dtype);
    const bool ran =
        !(pointwise(d) && !t) && t && run_dnn(d, x, w, *y, 1, 0, t->conv_forward, "kiln::conv2d");
    if (!ran && is_reduced_float(x.dtype))
      return conv2d_forward(widened(input), widened(weight), widened(bias), o).to(x.dtype);
    if (!ran && pointwise(d) && !t) {  // the products without im2col
      last = conv_path::portable;
      for (std::int64_t i = 0; i < d.n; ++i)
        gemm(w, 0, x, i * d.c * d.p * d.q, *y, i * d.k * d.p * d.q, ku, pqu, cu, {.tf32 = o.tf32});
    } else if (!ran) {
      last = conv_path::portable;
      const std::int64_t chunk = chunk_of(d), pq = d.p * d.q;
      auto cols = detail::allocate_tensor(x.dev, {chunk, d.crs(), pq}, x.dtype);
      for (std::int64_t n0 = 0; n0 < d.n; n0 += chunk) {
        const std::int64_t nb = std::min(chunk, d.n - n0);
        im2col(d, x, *cols, n0, nb);
        for (std::int64_t i = 0; i < nb; ++i)
          for (std::int64_t g = 0; g < d.g; ++g)
            gemm(w, g * d.kg() * d.cg() * d.r * d.s, *cols,
                 (i * d.crs() + g * d.cg() * d.r * d.s) * pq, *y,
                 ((n0 + i) * d.k + g * d.kg()) * pq, d.kg(), pq, d.cg() * d.r * d.s,
                 {.tf32 = o.tf32});
      }
    }
  }
  tensor out(std::move(y));
  if (bias.impl()) out = out + ops[2].view({1, d.k, 1, 1});
  return unbatched ? out.squeeze(0) : out;
}
}  // namespace

tensor conv2d(const tensor& input0, const tensor& weight0, const tensor& bias0,
              const conv2d_options& o) {
  // Inside a kiln::autocast scope, f32 operands run in the scope's 16-bit type (as matmul).
  const tensor input = detail::autocast_narrow(input0), weight = detail::autocast_narrow(weight0),
               bias = detail::autocast_narrow(bias0);
  if (!detail::grad_wanted({&input, &weight, &bias}))  // recorded ones do not move (fallback.hpp)
    return detail::run_op_falling_back(
        "conv2d", {input, weight, bias},
        [&](const std::vector<tensor>& x) { return conv2d_forward(x[0], x[1], x[2], o); });
  tensor out;
  {
    no_grad off;
    out = conv2d_forward(input, weight, bias, o);
  }
  return detail::grad::conv2d(input, weight, bias, o, out);
}

tensor conv2d_backward_data(const tensor& grad_output, const tensor& weight,
                            const shape_t& input_shape, const conv2d_options& o) {
  detail::reset_stats();
  last = conv_path::none;
  const detail::placed place =
      detail::place(op_class::conv, {grad_output.impl().get(), weight.impl().get()},
                    weight.impl() ? conv_flops(input_shape, weight.shape(), o) : 0);
  std::vector<tensor> ops =
      operands("conv2d_backward_data", {{"grad_output", &grad_output}, {"weight", &weight}});
  const conv_dims d =
      backward_dims("conv2d_backward_data", input_shape, weight.shape(), grad_output, o);
  const tensor_impl& dy = *ops[0].impl();
  const tensor_impl& w = *ops[1].impl();
  auto dx = detail::allocate_tensor(dy.dev, input_shape, dy.dtype);
  dx->automatic = place.automatic;
  if (empty(d)) return tensor(std::move(dx));
  const std::uint64_t ku = std::uint64_t(d.k), cu = std::uint64_t(d.c);
  const std::uint64_t pqu = std::uint64_t(d.p * d.q);
  if (pointwise(d) && run_pointwise(w, true, dy, *dx, cu, pqu, ku, d.n, o.tf32))
    return tensor(std::move(dx));
  const kiln_dnn_v1* t = detail::dnn_table(dy.dev, dy.dtype);
  if (t && run_dnn(d, *dx, w, dy, 1, 0, t->conv_backward_data, "kiln::conv2d_backward_data"))
    return tensor(std::move(dx));
  if (is_reduced_float(dy.dtype))
    return conv2d_backward_data(widened(grad_output), widened(weight), input_shape, o).to(dy.dtype);
  last = conv_path::portable;
  if (pointwise(d)) {  // the products straight into dx: col2im of a 1 x 1 kernel is the identity
    for (std::int64_t i = 0; i < d.n; ++i)
      gemm(w, 0, dy, i * d.k * d.p * d.q, *dx, i * d.c * d.p * d.q, cu, pqu, ku,
           {.trans_a = true, .tf32 = o.tf32});
    return tensor(std::move(dx));
  }
  const std::int64_t chunk = chunk_of(d), pq = d.p * d.q, crs_g = d.cg() * d.r * d.s;
  auto cols = detail::allocate_tensor(dy.dev, {chunk, d.crs(), pq}, dy.dtype);
  for (std::int64_t n0 = 0; n0 < d.n; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, d.n - n0);
    for (std::int64_t i = 0; i < nb; ++i)
      for (std::int64_t g = 0; g < d.g; ++g)  // cols_g = w_g^T dy_g
        gemm(w, g * d.kg() * crs_g, dy, ((n0 + i) * d.k + g * d.kg()) * pq, *cols,
             (i * d.crs() + g * crs_g) * pq, crs_g, pq, d.kg(), {.trans_a = true, .tf32 = o.tf32});
    detail::launch_conv(
        dy.dev, dy.dtype, detail::conv_kernel_kind::col2im,
        {detail::tensor_arg(*dx, n0 * d.c * d.h * d.w, false), detail::tensor_arg(*cols, 0, true)},
        d.geometry(), nb * d.c * d.h * d.w);
  }
  return tensor(std::move(dx));
}

tensor conv2d_backward_filter(const tensor& input, const tensor& grad_output,
                              const shape_t& weight_shape, const conv2d_options& o) {
  detail::reset_stats();
  last = conv_path::none;
  const detail::placed place =
      detail::place(op_class::conv, {input.impl().get(), grad_output.impl().get()},
                    input.impl() ? conv_flops(input.shape(), weight_shape, o) : 0);
  std::vector<tensor> ops =
      operands("conv2d_backward_filter", {{"input", &input}, {"grad_output", &grad_output}});
  const conv_dims d =
      backward_dims("conv2d_backward_filter", input.shape(), weight_shape, grad_output, o);
  const tensor_impl& x = *ops[0].impl();
  const tensor_impl& dy = *ops[1].impl();
  if (empty(d)) {
    tensor z = tensor::zeros(x.dev, weight_shape, x.dtype);
    z.impl()->automatic = place.automatic;
    return z;
  }
  auto dw = detail::allocate_tensor(x.dev, weight_shape, x.dtype);
  dw->automatic = place.automatic;
  const kiln_dnn_v1* t = detail::dnn_table(x.dev, x.dtype);
  if (t && run_dnn(d, x, *dw, dy, 1, 0, t->conv_backward_filter, "kiln::conv2d_backward_filter"))
    return tensor(std::move(dw));
  if (is_reduced_float(x.dtype))
    return conv2d_backward_filter(widened(input), widened(grad_output), weight_shape, o)
        .to(x.dtype);
  last = conv_path::portable;
  const std::int64_t chunk = chunk_of(d), pq = d.p * d.q, crs_g = d.cg() * d.r * d.s;
  auto cols = detail::allocate_tensor(x.dev, {chunk, d.crs(), pq}, x.dtype);
  for (std::int64_t n0 = 0; n0 < d.n; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, d.n - n0);
    detail::launch_conv(
        x.dev, x.dtype, detail::conv_kernel_kind::im2col,
        {detail::tensor_arg(*cols, 0, false), detail::tensor_arg(x, n0 * d.c * d.h * d.w, true)},
        d.geometry(), nb * d.crs() * pq);
    for (std::int64_t i = 0; i < nb; ++i)
      for (std::int64_t g = 0; g < d.g; ++g)  // dw_g (+)= dy_g cols_g^T
        gemm(dy, ((n0 + i) * d.k + g * d.kg()) * pq, *cols, (i * d.crs() + g * crs_g) * pq, *dw,
             g * d.kg() * crs_g, d.kg(), crs_g, pq,
             {.trans_b = true, .beta = n0 + i == 0 ? 0.0 : 1.0, .tf32 = o.tf32});
  }
  return tensor(std::move(dw));
}

}  // namespace kiln
