// max_pool2d and avg_pool2d with their backwards: checks, the output size, then the device's
// "dnn" extension (cuDNN) for what it computes exactly as PyTorch does (max pooling without
// indices, average pooling forward; no dilation, no ceil mode), else the generated kernels of
// conv_kernels.cpp. Backwards are always the generated gathers: cuDNN's max backward needs
// the forward's input and output rather than indices, and its average backward the same.
#include <limits>
#include <string>

#include "autograd/derivatives.hpp"
#include "kiln/tensor/conv.hpp"
#include "tensor/conv_kernels.hpp"
#include "tensor/dnn.hpp"

namespace kiln {
namespace {

using detail::conv_kernel_kind;
using detail::tensor_impl;

struct pool_dims {
  std::int64_t n, c, h, w, p, q;
  detail::conv_geometry g;
  bool batched;
};

// Output size per dimension (PyTorch's pooling_output_shape).
std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t pad,
                      std::int64_t dil, bool ceil) {
  const std::int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  if (span < 0) return 0;
  std::int64_t out = (span + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (out - 1) * s >= in + pad) --out;  // the last window must start inside
  return out;
}

pool_dims dims_of(const char* fn, const shape_t& x, const pool2d_options& o, bool dilation_ok) {
  const std::int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0];
  const std::int64_t sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const std::string opts =
      "kernel " + detail::pair_text(o.kernel) + ", stride " + detail::pair_text(o.stride) +
      ", padding " + detail::pair_text(o.padding) + ", dilation " + detail::pair_text(o.dilation);
  for (int d = 0; d < 2; ++d) {
    if (o.kernel[d] < 1 || o.stride[d] < 0 || o.dilation[d] < 1 || o.padding[d] < 0)
      throw invalid_argument(std::string("kiln::") + fn + ": " + opts +
                             ": kernel and dilation must be at least 1, stride and padding at "
                             "least 0 (stride 0: the kernel size)");
    if (2 * o.padding[d] > o.kernel[d])
      throw invalid_argument(std::string("kiln::") + fn + ": " + opts +
                             ": padding must be at most half the kernel");
  }
  if (!dilation_ok && (o.dilation[0] != 1 || o.dilation[1] != 1))
    throw invalid_argument(std::string("kiln::") + fn + ": dilation " +
                           detail::pair_text(o.dilation) + " is for max pooling only");
  if (x.size() != 3 && x.size() != 4)
    throw shape_error(std::string("kiln::") + fn + ": expects [N, C, H, W] or [C, H, W], got " +
                      to_string(x));
  pool_dims d{};
  d.batched = x.size() == 4;
  const std::size_t b = d.batched ? 1 : 0;
  d.n = d.batched ? x[0] : 1;
  d.c = x[b], d.h = x[b + 1], d.w = x[b + 2];
  d.p = out_size(d.h, o.kernel[0], sh, o.padding[0], o.dilation[0], o.ceil_mode);
  d.q = out_size(d.w, o.kernel[1], sw, o.padding[1], o.dilation[1], o.ceil_mode);
  if (d.p < 1 || d.q < 1)
    throw shape_error(std::string("kiln::") + fn + ": input " + to_string(x) + " with " + opts +
                      " gives an empty output");
  d.g = {d.c, d.h, d.w,          o.kernel[0],  o.kernel[1],   d.p,          d.q,
         sh,  sw,  o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  return d;
}

shape_t out_shape(const pool_dims& d) {
  return d.batched ? shape_t{d.n, d.c, d.p, d.q} : shape_t{d.c, d.p, d.q};
}

// An evaluated, contiguous floating-point tensor.
tensor operand(const char* fn, const char* name, const tensor& x) {
  if (!x.impl()) throw invalid_argument(std::string("kiln::") + fn + ": " + name + " is undefined");
  const scalar_type t = x.dtype();
  if (t != scalar_type::f32 && t != scalar_type::f64 && !is_reduced_float(t))
    throw dtype_error(std::string("kiln::") + fn + ": " + name + " has dtype " + type_name(t) +
                      "; only float, double, half and bfloat16 are supported");
  return detail::contiguous_of(x);
}

// f16 and bf16 have no portable pooling kernels: such a tensor is pooled in f32 and the result
// rounded once (exact for max pooling; one rounding of the f32 mean for average pooling).
bool reduced(const tensor& x) { return x.impl() && is_reduced_float(x.dtype()); }
tensor widened(const tensor& x) { return x.to(scalar_type::f32); }

void same_device(const char* fn, const tensor& a, const tensor& b) {
  if (!(a.get_device() == b.get_device()))
    throw device_mismatch(std::string("kiln::") + fn + ": grad_output is on " +
                          a.get_device().id() + ", indices on " + b.get_device().id());
}

// The dnn table's pooling when it computes this exactly; false when absent or refused.
bool run_dnn_pool(const pool_dims& d, const pool2d_options& o, kiln_dnn_pool_mode mode,
                  const tensor_impl& x, const tensor_impl& y) {
  if (o.ceil_mode || o.dilation[0] != 1 || o.dilation[1] != 1) return false;
  const kiln_dnn_v1* t = detail::dnn_table(x.dev, x.dtype);
  if (!t || !t->pool_forward) return false;
  kiln_dnn_pool_desc p{};
  p.dtype = detail::dnn_dtype(x.dtype);
  p.mode = mode;
  p.n = d.n, p.c = d.c, p.h = d.h, p.w = d.w, p.p = d.p, p.q = d.q;
  p.win_h = uint32_t(d.g.r), p.win_w = uint32_t(d.g.s);
  p.stride_h = uint32_t(d.g.sh), p.stride_w = uint32_t(d.g.sw);
  p.pad_h = uint32_t(d.g.ph), p.pad_w = uint32_t(d.g.pw);
  p.x = detail::dnn_ref(x), p.y = detail::dnn_ref(y);
  const kiln_status st = t->pool_forward(x.dev.default_queue().impl()->handle, &p);
  if (st == KILN_ERR_UNSUPPORTED) return false;
  detail::check(*x.dev.impl()->api, st, "kiln::pool2d");
  detail::stats_now().kernel_launches++;
  return true;
}

detail::arg_binding lowest_of(scalar_type t) {
  return t == scalar_type::f64 ? detail::bind_arg(-std::numeric_limits<double>::infinity())
                               : detail::bind_arg(-std::numeric_limits<float>::infinity());
}

// Checks a backward's grad_output (and indices) against the forward's output shape.
void check_output(const char* fn, const char* name, const tensor& t, const pool_dims& d,
                  const shape_t& input_shape) {
  if (t.shape() != out_shape(d))
    throw shape_error(std::string("kiln::") + fn + ": " + name + " is " + to_string(t.shape()) +
                      " but pooling input " + to_string(input_shape) + " gives " +
                      to_string(out_shape(d)));
}

}  // namespace

namespace {
pooled max_pool2d_with_indices_forward(const tensor& input, const pool2d_options& o) {
  if (reduced(input)) {
    pooled r = max_pool2d_with_indices_forward(widened(input), o);
    return {r.values.to(input.dtype()), r.indices};
  }
  detail::reset_stats();
  const tensor x = operand("max_pool2d", "input", input);
  const pool_dims d = dims_of("max_pool2d", x.shape(), o, true);
  const tensor_impl& xi = *x.impl();
  auto y = detail::allocate_tensor(xi.dev, out_shape(d), xi.dtype);
  auto idx = detail::allocate_tensor(xi.dev, out_shape(d), scalar_type::i64);
  detail::launch_conv(xi.dev, xi.dtype, conv_kernel_kind::max_pool,
                      {detail::tensor_arg(*y, 0, false), detail::tensor_arg(*idx, 0, false),
                       detail::tensor_arg(xi, 0, true)},
                      d.g, d.n * d.c * d.p * d.q, {lowest_of(xi.dtype)});
  return {tensor(std::move(y)), tensor(std::move(idx))};
}
}  // namespace

pooled max_pool2d_with_indices(const tensor& input, const pool2d_options& o) {
  pooled r = max_pool2d_with_indices_forward(input, o);
  if (detail::grad_wanted({&input}))
    r.values = detail::grad::max_pool2d(input, r.indices, o, r.values);
  return r;
}

tensor max_pool2d(const tensor& input, const pool2d_options& o) {
  // Training needs the argmax of each window: the indexed kernel, recorded.
  if (detail::grad_wanted({&input})) return max_pool2d_with_indices(input, o).values;
  detail::reset_stats();
  const tensor x = operand("max_pool2d", "input", input);
  const pool_dims d = dims_of("max_pool2d", x.shape(), o, true);
  const tensor_impl& xi = *x.impl();
  auto y = detail::allocate_tensor(xi.dev, out_shape(d), xi.dtype);
  if (d.n * d.c == 0 || run_dnn_pool(d, o, KILN_DNN_POOL_MAX, xi, *y)) return tensor(std::move(y));
  return max_pool2d_with_indices_forward(x, o).values;
}

tensor max_pool2d_backward(const tensor& grad_output, const tensor& indices,
                           const shape_t& input_shape, const pool2d_options& o) {
  if (reduced(grad_output))
    return max_pool2d_backward(widened(grad_output), indices, input_shape, o)
        .to(grad_output.dtype());
  detail::reset_stats();
  const char* fn = "max_pool2d_backward";
  const tensor dy = operand(fn, "grad_output", grad_output);
  if (!indices.impl()) throw invalid_argument("kiln::max_pool2d_backward: indices is undefined");
  if (indices.dtype() != scalar_type::i64)
    throw dtype_error("kiln::max_pool2d_backward: indices has dtype " +
                      std::string(type_name(indices.dtype())) +
                      "; expected int64 (from "
                      "max_pool2d_with_indices)");
  same_device(fn, dy, indices);
  const pool_dims d = dims_of(fn, input_shape, o, true);
  check_output(fn, "grad_output", dy, d, input_shape);
  check_output(fn, "indices", indices, d, input_shape);
  const tensor idx = detail::contiguous_of(indices);
  const tensor_impl& g = *dy.impl();
  auto dx = detail::allocate_tensor(g.dev, input_shape, g.dtype);
  detail::launch_conv(g.dev, g.dtype, conv_kernel_kind::max_unpool,
                      {detail::tensor_arg(*dx, 0, false), detail::tensor_arg(g, 0, true),
                       detail::tensor_arg(*idx.impl(), 0, true)},
                      d.g, d.n * d.c * d.h * d.w);
  return tensor(std::move(dx));
}

namespace {
tensor avg_pool2d_forward(const tensor& input, const pool2d_options& o) {
  detail::reset_stats();
  const tensor x = operand("avg_pool2d", "input", input);
  const pool_dims d = dims_of("avg_pool2d", x.shape(), o, false);
  const tensor_impl& xi = *x.impl();
  auto y = detail::allocate_tensor(xi.dev, out_shape(d), xi.dtype);
  const auto mode =
      o.count_include_pad ? KILN_DNN_POOL_AVG_INCLUDE_PAD : KILN_DNN_POOL_AVG_EXCLUDE_PAD;
  if (d.n * d.c == 0 || run_dnn_pool(d, o, mode, xi, *y)) return tensor(std::move(y));
  if (reduced(x)) return avg_pool2d_forward(widened(x), o).to(x.dtype());
  detail::launch_conv(xi.dev, xi.dtype, conv_kernel_kind::avg_pool,
                      {detail::tensor_arg(*y, 0, false), detail::tensor_arg(xi, 0, true)}, d.g,
                      d.n * d.c * d.p * d.q,
                      {detail::bind_arg(std::int64_t(o.count_include_pad ? 1 : 0))});
  return tensor(std::move(y));
}
}  // namespace

tensor avg_pool2d(const tensor& input, const pool2d_options& o) {
  const tensor r = avg_pool2d_forward(input, o);
  return detail::grad_wanted({&input}) ? detail::grad::avg_pool2d(input, o, r) : r;
}

tensor avg_pool2d_backward(const tensor& grad_output, const shape_t& input_shape,
                           const pool2d_options& o) {
  if (reduced(grad_output))
    return avg_pool2d_backward(widened(grad_output), input_shape, o).to(grad_output.dtype());
  detail::reset_stats();
  const char* fn = "avg_pool2d_backward";
  const tensor dy = operand(fn, "grad_output", grad_output);
  const pool_dims d = dims_of(fn, input_shape, o, false);
  check_output(fn, "grad_output", dy, d, input_shape);
  const tensor_impl& g = *dy.impl();
  auto dx = detail::allocate_tensor(g.dev, input_shape, g.dtype);
  detail::launch_conv(g.dev, g.dtype, conv_kernel_kind::avg_unpool,
                      {detail::tensor_arg(*dx, 0, false), detail::tensor_arg(g, 0, true)}, d.g,
                      d.n * d.c * d.h * d.w,
                      {detail::bind_arg(std::int64_t(o.count_include_pad ? 1 : 0))});
  return tensor(std::move(dx));
}

}  // namespace kiln
