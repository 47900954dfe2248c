// layer_norm and rms_norm with their backwards: argument checks, then the row kernels of
// layer_norm_kernels.cpp; autograd recording in autograd/derivatives_norm.cpp.
#include "kiln/tensor/layer_norm.hpp"

#include <string>

#include "autograd/derivatives_norm.hpp"
#include "autograd/graph.hpp"
#include "tensor/kernel_args.hpp"
#include "tensor/layer_norm_kernels.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::norm_kernel_key;
using detail::norm_kernel_kind;

std::string fn_name(bool rms, bool backward) {
  return std::string("kiln::") + (rms ? "rms_norm" : "layer_norm") + (backward ? "_backward" : "");
}

struct rows_of {
  std::int64_t rows = 0, n = 1;
  shape_t stat_shape;  // x's leading dims, then a 1 per normalised dim
};

rows_of check_x(const std::string& fn, const tensor& x, const shape_t& ns) {
  if (!x.impl()) throw invalid_argument(fn + ": input is undefined");
  const scalar_type t = x.dtype();
  if (t != scalar_type::f32 && t != scalar_type::f64 && !is_reduced_float(t))
    throw dtype_error(fn + ": input has dtype " + type_name(t) +
                      "; only f32, f64, f16 and bf16 are supported");
  const shape_t& s = x.shape();
  if (ns.empty() || ns.size() > s.size() || !std::equal(ns.begin(), ns.end(), s.end() - ns.size()))
    throw shape_error(fn + ": normalized_shape " + to_string(ns) +
                      " must be the trailing dims of the input " + to_string(s) +
                      " (one at least)");
  rows_of r;
  const std::size_t lead = s.size() - ns.size();
  r.rows = 1;
  for (std::size_t d = 0; d < s.size(); ++d) {
    (d < lead ? r.rows : r.n) *= s[d];
    r.stat_shape.push_back(d < lead ? s[d] : 1);
  }
  return r;
}

// weight or bias: undefined, or normalized_shape in x's dtype (f32 allowed with 16-bit x) on
// x's device, returned contiguous.
tensor check_param(const std::string& fn, const char* name, const tensor& p, const tensor& x,
                   const shape_t& ns) {
  if (!p.impl()) return p;
  if (p.shape() != ns)
    throw shape_error(fn + ": " + name + " is " + to_string(p.shape()) +
                      ", expected normalized_shape " + to_string(ns));
  const bool ok =
      p.dtype() == x.dtype() || (is_reduced_float(x.dtype()) && p.dtype() == scalar_type::f32);
  if (!ok)
    throw dtype_error(fn + ": " + name + " is " + type_name(p.dtype()) + ", the input " +
                      type_name(x.dtype()) + " (expected the input's dtype, or f32 with f16/bf16)");
  if (!(p.get_device() == x.get_device()))
    throw device_mismatch(fn + ": " + name + " is on " + p.get_device().id() + ", the input on " +
                          x.get_device().id());
  return detail::contiguous_of(p);
}

void check_eps(const std::string& fn, double eps) {
  if (!(eps > 0))
    throw invalid_argument(fn + ": eps is " + std::to_string(eps) + "; it must be positive");
}

void add(std::vector<detail::arg_binding>& a, const tensor& t) {
  const detail::tensor_impl& i = *t.impl();
  detail::add_mem(a, *i.mem, std::uint64_t(i.offset) * size_of(i.dtype), i.dtype);
}

scalar_type param_type(const tensor& x, const tensor& w, const tensor& b) {
  return w.impl() ? w.dtype() : b.impl() ? b.dtype() : x.dtype();
}

// Whether a forward whose x moves in words of 8 (vec) reads its weight and bias in words too:
// each starts on a 16-byte boundary (16-bit or f32 parameters).
bool param_words(std::uint32_t vec, std::int64_t n, const tensor& w, const tensor& b) {
  // Whole words only (norm_vec gives 8 only for rows of a multiple of 8: kept explicit here).
  if (vec != 8 || n % 8 || !(w.impl() || b.impl())) return false;
  for (const tensor* p : {&w, &b}) {
    if (!p->impl()) continue;
    const scalar_type t = p->dtype();
    if (!is_reduced_float(t) && t != scalar_type::f32) return false;
    if (p->impl()->offset % (16 / std::int64_t(size_of(t)))) return false;
  }
  return true;
}

layer_norm_result forward(bool rms, const tensor& input, const shape_t& ns, const tensor& weight,
                          const tensor& bias, double eps) {
  const std::string fn = fn_name(rms, false);
  const rows_of r = check_x(fn, input, ns);
  const tensor w = check_param(fn, "weight", weight, input, ns);
  const tensor b = check_param(fn, "bias", bias, input, ns);
  if (w.impl() && b.impl() && w.dtype() != b.dtype())
    throw dtype_error(fn + ": weight is " + type_name(w.dtype()) + ", bias " +
                      type_name(b.dtype()));
  check_eps(fn, eps);
  detail::reset_stats();
  const tensor x = detail::contiguous_of(input);
  const device& dev = x.impl()->dev;
  const scalar_type acc = detail::norm_acc_type(x.dtype());
  layer_norm_result res;
  res.output = tensor(detail::allocate_tensor(dev, x.shape(), x.dtype()));
  if (!rms) res.mean = tensor(detail::allocate_tensor(dev, r.stat_shape, acc));
  res.rstd = tensor(detail::allocate_tensor(dev, r.stat_shape, acc));
  const std::uint32_t lanes = detail::norm_forward_lanes(dev, x.dtype(), r.n, x.impl()->offset);
  const std::uint32_t vec = detail::norm_vec(x.dtype(), lanes, r.n, {x.impl()->offset});
  const norm_kernel_key k{norm_kernel_kind::forward,
                          x.dtype(),
                          param_type(x, w, b),
                          rms,
                          w.impl() != nullptr,
                          b.impl() != nullptr,
                          lanes,
                          detail::norm_cap(lanes, r.n, vec),
                          vec,
                          detail::norm_warp(dev, lanes),
                          param_words(vec, r.n, w, b)};
  std::vector<detail::arg_binding> a;
  add(a, res.output);
  if (!rms) add(a, res.mean);
  add(a, res.rstd);
  add(a, x);
  if (w.impl()) add(a, w);
  if (b.impl()) add(a, b);
  a.push_back(detail::bind_arg(r.n));
  a.push_back(detail::bind_arg(r.rows));
  a.push_back(acc == scalar_type::f64 ? detail::bind_arg(eps) : detail::bind_arg(float(eps)));
  detail::launch_norm(dev, k, std::move(a), r.rows);
  return res;
}

layer_norm_result record(bool rms, const tensor& x, const shape_t& ns, const tensor& w,
                         const tensor& b, double eps) {
  if (!detail::grad_wanted({&x, &w, &b})) return forward(rms, x, ns, w, b, eps);
  layer_norm_result r;
  {
    no_grad off;
    r = forward(rms, x, ns, w, b, eps);
  }
  r.output = detail::grad::layer_norm(rms, x, ns, w, b, r);
  return r;
}

double rms_eps(const tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.impl() && x.dtype() == scalar_type::f64 ? 0x1p-52 : 0x1p-23;
}

// A statistic (mean or rstd) of the forward: rows elements of the accumulation type.
tensor check_stat(const std::string& fn, const char* name, const tensor& s, const tensor& x,
                  const rows_of& r) {
  if (!s.impl()) throw invalid_argument(fn + ": " + name + " is undefined");
  if (s.numel() != r.rows)
    throw shape_error(fn + ": " + name + " is " + to_string(s.shape()) + ", expected " +
                      to_string(r.stat_shape));
  if (s.dtype() != detail::norm_acc_type(x.dtype()))
    throw dtype_error(fn + ": " + name + " is " + type_name(s.dtype()) + ", expected " +
                      type_name(detail::norm_acc_type(x.dtype())));
  if (!(s.get_device() == x.get_device()))
    throw device_mismatch(fn + ": " + name + " is on " + s.get_device().id() + ", the input on " +
                          x.get_device().id());
  return detail::contiguous_of(s);
}

layer_norm_grads backward(bool rms, const tensor& grad_output, const tensor& input,
                          const shape_t& ns, const tensor& mean_in, const tensor& rstd_in,
                          const tensor& weight, bool want_weight, bool want_bias) {
  const std::string fn = fn_name(rms, true);
  const rows_of r = check_x(fn, input, ns);
  if (!grad_output.impl()) throw invalid_argument(fn + ": grad_output is undefined");
  if (grad_output.shape() != input.shape())
    throw shape_error(fn + ": grad_output is " + to_string(grad_output.shape()) + ", the input " +
                      to_string(input.shape()));
  if (grad_output.dtype() != input.dtype())
    throw dtype_error(fn + ": grad_output is " + type_name(grad_output.dtype()) + ", the input " +
                      type_name(input.dtype()));
  if (!(grad_output.get_device() == input.get_device()))
    throw device_mismatch(fn + ": grad_output is on " + grad_output.get_device().id() +
                          ", the input on " + input.get_device().id());
  const tensor w = check_param(fn, "weight", weight, input, ns);
  if (want_weight && !w.impl())
    throw invalid_argument(fn + ": the weight gradient needs the weight");
  const tensor mean = rms ? tensor() : check_stat(fn, "mean", mean_in, input, r);
  const tensor rstd = check_stat(fn, "rstd", rstd_in, input, r);
  no_grad off;
  detail::reset_stats();
  const tensor x = detail::contiguous_of(input), dy = detail::contiguous_of(grad_output);
  const device& dev = x.impl()->dev;
  const scalar_type acc = detail::norm_acc_type(x.dtype());
  const scalar_type pt = w.impl() ? w.dtype() : x.dtype();
  layer_norm_grads g;
  g.input = tensor(detail::allocate_tensor(dev, x.shape(), x.dtype()));
  const std::initializer_list<std::int64_t> offsets{x.impl()->offset, dy.impl()->offset};
  // With parameter gradients wanted, one pass over dy and x on warp32 devices (norm_fused_lanes):
  // the kernel also writes partial column sums, one row per group.
  const std::uint32_t fused_lanes =
      want_weight || want_bias ? detail::norm_fused_lanes(dev, x.dtype(), r.n, offsets) : 0;
  const std::uint32_t lanes = fused_lanes ? fused_lanes : detail::norm_lanes(dev, r.n);
  const std::uint32_t vec = detail::norm_vec(x.dtype(), lanes, r.n, offsets);
  const std::int64_t groups = fused_lanes ? detail::norm_fused_groups(dev, lanes, r.rows) : 0;
  tensor pw, pb;
  if (fused_lanes && want_weight) pw = tensor(detail::allocate_tensor(dev, {groups, r.n}, acc));
  if (fused_lanes && want_bias) pb = tensor(detail::allocate_tensor(dev, {groups, r.n}, acc));
  {
    norm_kernel_key k{norm_kernel_kind::backward,
                      x.dtype(),
                      pt,
                      rms,
                      w.impl() != nullptr,
                      false,
                      lanes,
                      detail::norm_cap(lanes, r.n, vec),
                      vec,
                      detail::norm_warp(dev, lanes)};
    k.fuse = std::uint8_t((pw.impl() ? 1 : 0) | (pb.impl() ? 2 : 0));
    std::vector<detail::arg_binding> a;
    add(a, g.input);
    add(a, dy);
    add(a, x);
    if (!rms) add(a, mean);
    add(a, rstd);
    if (w.impl()) add(a, w);
    if (pw.impl()) add(a, pw);
    if (pb.impl()) add(a, pb);
    a.push_back(detail::bind_arg(r.n));
    a.push_back(detail::bind_arg(r.rows));
    detail::launch_norm(dev, k, std::move(a), r.rows && k.fuse ? groups : r.rows);
  }
  if (!want_weight && !want_bias) return g;
  if (!fused_lanes) {
    // Partial column sums over chunks of rows. Devices with barriers (GPUs): one item per chunk
    // and column, about 128K of them. Else one item per chunk of whole rows: 64 chunks at most.
    const bool by_columns = dev.supports(feature::barrier);
    const std::int64_t want =
        by_columns ? (std::int64_t(1) << 17) / std::max<std::int64_t>(r.n, 1) : 64;
    const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(r.rows, want));
    const std::int64_t chunk = (r.rows + parts - 1) / parts;
    const std::int64_t used = chunk ? (r.rows + chunk - 1) / chunk : 1;
    if (want_weight) pw = tensor(detail::allocate_tensor(dev, {used, r.n}, acc));
    if (want_bias) pb = tensor(detail::allocate_tensor(dev, {used, r.n}, acc));
    const norm_kernel_key k{norm_kernel_kind::params, x.dtype(), pt, rms, want_weight, want_bias,
                            by_columns ? 0u : 1u};
    std::vector<detail::arg_binding> a;
    if (want_weight) add(a, pw);
    if (want_bias) add(a, pb);
    add(a, dy);
    if (want_weight) {
      add(a, x);
      if (!rms) add(a, mean);
      add(a, rstd);
    }
    a.push_back(detail::bind_arg(r.n));
    a.push_back(detail::bind_arg(r.rows));
    a.push_back(detail::bind_arg(chunk));
    detail::launch_norm(dev, k, std::move(a), r.rows ? (by_columns ? used * r.n : used) : 0);
  }
  // The partials' columns summed into the gradients, in the parameters' type, by one kernel.
  const std::int64_t parts = r.rows ? pw.impl() ? pw.shape()[0] : pb.shape()[0] : 0;
  if (want_weight) g.weight = tensor(detail::allocate_tensor(dev, ns, pt));
  if (want_bias) g.bias = tensor(detail::allocate_tensor(dev, ns, pt));
  const norm_kernel_key k{norm_kernel_kind::params_sum,
                          x.dtype(),
                          pt,
                          false,  // the same text for both norms
                          want_weight,
                          want_bias,
                          dev.supports(feature::barrier) ? 32u : 1u};
  std::vector<detail::arg_binding> a;
  if (want_weight) add(a, g.weight);
  if (want_bias) add(a, g.bias);
  if (want_weight) add(a, pw);
  if (want_bias) add(a, pb);
  a.push_back(detail::bind_arg(r.n));
  a.push_back(detail::bind_arg(parts));
  detail::launch_norm(dev, k, std::move(a), r.n);
  return g;
}

}  // namespace

layer_norm_result native_layer_norm(const tensor& x, const shape_t& normalized_shape,
                                    const tensor& weight, const tensor& bias, double eps) {
  return record(false, x, normalized_shape, weight, bias, eps);
}

tensor layer_norm(const tensor& x, const shape_t& normalized_shape, const tensor& weight,
                  const tensor& bias, double eps) {
  return native_layer_norm(x, normalized_shape, weight, bias, eps).output;
}

layer_norm_result native_rms_norm(const tensor& x, const shape_t& normalized_shape,
                                  const tensor& weight, std::optional<double> eps) {
  return record(true, x, normalized_shape, weight, tensor(), rms_eps(x, eps));
}

tensor rms_norm(const tensor& x, const shape_t& normalized_shape, const tensor& weight,
                std::optional<double> eps) {
  return native_rms_norm(x, normalized_shape, weight, eps).output;
}

layer_norm_grads layer_norm_backward(const tensor& grad_output, const tensor& x,
                                     const shape_t& normalized_shape, const tensor& mean,
                                     const tensor& rstd, const tensor& weight, bool want_weight,
                                     bool want_bias) {
  return backward(false, grad_output, x, normalized_shape, mean, rstd, weight, want_weight,
                  want_bias);
}

layer_norm_grads rms_norm_backward(const tensor& grad_output, const tensor& x,
                                   const shape_t& normalized_shape, const tensor& rstd,
                                   const tensor& weight, bool want_weight) {
  return backward(true, grad_output, x, normalized_shape, tensor(), rstd, weight, want_weight,
                  false);
}

}  // namespace kiln
