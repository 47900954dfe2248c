// topk and multinomial (kiln/tensor/sampling.hpp): checks and shapes here, the kernels in
// sampling_kernels.cpp. topk's values are a gather of x at the chosen indices (exact bits),
// recorded with scatter-add as backward; multinomial without replacement is topk of
// Exp(1) / w keys.
#include "kiln/tensor/sampling.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "autograd/derivatives_index.hpp"
#include "kiln/tensor/autograd.hpp"
#include "kiln/tensor/indexing.hpp"
#include "tensor/indexing_kernels.hpp"
#include "tensor/sampling_kernels.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;

// A stored handle of t (a lazy t is evaluated into new contiguous storage).
tensor stored(const tensor& t) { return t.is_lazy() ? detail::contiguous_of(t) : t; }

}  // namespace

namespace detail {

tensor topk_rows(const tensor& x, std::int64_t k, bool largest, bool interleaved,
                 std::int64_t least_chunk, std::int64_t items) {
  const tensor xt = contiguous_of(x);  // itself when stored and contiguous
  const device& dev = xt.get_device();
  const std::int64_t n = xt.size(-1), rows = n ? xt.numel() / n : 0;
  shape_t shape = xt.shape();
  shape.back() = k;
  if (k == 0 || rows == 0) return tensor::zeros(dev, shape, scalar_type::i64);
  const scalar_type t = xt.dtype(), vt = topk_value_type(t);
  // A chunk keeps its k best, so chunks of >= 8k entries shrink each row at least 8-fold.
  // Longer chunks cost fewer insertions (a chunk of c entries inserts about k (1 + ln(c / k))
  // times), so a chunk is no shorter than it takes to give about `items` items in all.
  const std::int64_t per_row = std::max<std::int64_t>(1, (items + rows - 1) / rows);
  std::shared_ptr<tensor_impl> cv, ci;
  for (std::int64_t m = n;;) {
    const std::int64_t chunk = std::max({least_chunk, 8 * k, (m + per_row - 1) / per_row});
    const std::int64_t chunks = (m + chunk - 1) / chunk;
    auto ov = allocate_tensor(dev, {rows, chunks, k}, vt);
    auto oi = allocate_tensor(dev, {rows, chunks, k}, scalar_type::i64);
    launch_topk_pass(cv ? nullptr : xt.impl().get(), cv.get(), ci.get(), *ov, *oi, t, rows, m,
                     chunks, chunk, interleaved, k, largest);
    cv = std::move(ov);
    ci = std::move(oi);
    if (chunks == 1) break;
    m = chunks * k;
  }
  return tensor(std::move(ci)).view(shape);
}

bool topk_group_fits(const device& dev, std::int64_t n, std::int64_t k) {
  const device_info& info = dev.info();
  const std::uint64_t local_bytes = std::uint64_t(topk_group_max_k) * 16 + 2 * 1024 + 16;
  return dev.supports(feature::barrier) && dev.supports(feature::atomics) &&
         k <= topk_group_max_k && n < (std::int64_t{1} << 31) &&
         (!info.max_work_group_size || info.max_work_group_size >= topk_group_items) &&
         (!info.local_mem_bytes || info.local_mem_bytes >= local_bytes);
}

tensor topk_rows_group(const tensor& x, std::int64_t k, bool largest) {
  const tensor xt = contiguous_of(x);
  const device& dev = xt.get_device();
  const std::int64_t n = xt.size(-1), rows = n ? xt.numel() / n : 0;
  shape_t shape = xt.shape();
  shape.back() = k;
  if (!topk_group_fits(dev, n, k))
    throw unsupported("kiln::topk: the work-group kernel does not fit " + dev.id() +
                      " for k = " + std::to_string(k));
  if (k == 0 || rows == 0) return tensor::zeros(dev, shape, scalar_type::i64);
  auto out = allocate_tensor(dev, {rows, k}, scalar_type::i64);
  launch_topk_group(*xt.impl(), *out, rows, n, k, largest);
  return tensor(std::move(out)).view(shape);
}

}  // namespace detail

topk_result topk(const tensor& x0, std::int64_t k, int dim, bool largest, bool /*sorted*/) {
  if (!x0.defined()) throw invalid_argument("kiln::topk: the input is undefined");
  // A 0-d tensor is one entry along dim 0 or -1, as in PyTorch.
  const tensor x1 = x0.dim() == 0 ? x0.reshape({1}) : x0;
  const int d = detail::normalise_axis(dim, x1.dim(), "kiln::topk");
  const std::int64_t n = x1.size(d);
  if (k < 0 || k > n)
    throw invalid_argument("kiln::topk: k = " + std::to_string(k) + " is out of range for dim " +
                           std::to_string(d) + " of size " + std::to_string(n) + " (input " +
                           to_string(x0.shape()) + ")");
  shape_t shape = x1.shape();
  shape[std::size_t(d)] = k;
  tensor values, indices;
  {
    no_grad off;
    const tensor x = stored(x1);
    const int last = x.dim() - 1;
    const tensor xt = d == last ? x.contiguous() : x.transpose(d, last).contiguous();
    // GPUs: a work-group per row (radix select) where it fits, else interleaved chunks of
    // >= 256 entries (neighbouring items read neighbouring entries), some 64 items per compute
    // unit in flight; CPUs: contiguous chunks of >= 1024, some 8 items per core.
    const device& dev = x.get_device();
    const device_info& info = dev.info();
    const bool gpu = info.type == device_type::gpu;
    const std::int64_t units = std::max<std::int64_t>(1, info.compute_units);
    const tensor it = gpu && detail::topk_group_fits(dev, n, k)
                          ? detail::topk_rows_group(xt, k, largest)
                          : detail::topk_rows(xt, k, largest, gpu, gpu ? 256 : 1024,
                                              gpu ? 64 * 32 * units : 8 * units);
    indices = d == last ? it : it.transpose(d, last).contiguous();
    auto out = detail::allocate_tensor(x.get_device(), shape, x.dtype());
    if (k > 0)
      detail::launch_gather(*out, *x.impl(), *indices.impl(), d, x.strides(), indices.strides(),
                            x.strides()[std::size_t(d)]);
    values = tensor(std::move(out));
  }
  if (detail::grad_wanted({&x1})) {
    const shape_t xs = x1.shape();
    values =
        autograd::record("topk", values, {x1},
                         [xs, d, indices](const tensor& g, const tensor&) -> std::vector<tensor> {
                           return {detail::scatter_add_into(tensor(), d, indices, g, xs)};
                         });
  }
  if (x0.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

namespace {

bool is_float(scalar_type t) {
  return t == scalar_type::f32 || t == scalar_type::f64 || is_reduced_float(t);
}

// One read back: negative / inf / NaN weights, rows without a positive weight, and the fewest
// positive weights of a row (w: [rows, n], rows > 0).
void check_weights(const tensor& w, std::int64_t samples, bool replacement) {
  const double inf = std::numeric_limits<double>::infinity();
  const tensor bad = ((w < 0.0).to(scalar_type::i64) + (w != w).to(scalar_type::i64) +
                      (w == inf).to(scalar_type::i64))
                         .sum();
  const tensor nz = (w > 0.0).to(scalar_type::i64).sum({-1});
  const std::vector<std::int64_t> s =
      cat({bad.reshape({1}), (nz == std::int64_t{0}).to(scalar_type::i64).sum().reshape({1}),
           nz.min().reshape({1})},
          0)
          .to_vector<std::int64_t>();
  if (s[0] > 0)
    throw invalid_argument("kiln::multinomial: " + std::to_string(s[0]) +
                           " weight(s) are negative, inf or NaN");
  if (s[1] > 0)
    throw invalid_argument("kiln::multinomial: " + std::to_string(s[1]) +
                           " row(s) have no positive weight");
  if (!replacement && s[2] < samples)
    throw invalid_argument("kiln::multinomial: " + std::to_string(samples) +
                           " samples without replacement, but a row has only " +
                           std::to_string(s[2]) + " positive weight(s)");
}

}  // namespace

tensor multinomial(const tensor& probs, std::int64_t num_samples, bool replacement,
                   std::uint64_t seed) {
  if (!probs.defined()) throw invalid_argument("kiln::multinomial: probs is undefined");
  if (!is_float(probs.dtype()))
    throw dtype_error(std::string("kiln::multinomial: probs must be floating point, got ") +
                      type_name(probs.dtype()));
  if (probs.dim() != 1 && probs.dim() != 2)
    throw shape_error("kiln::multinomial: probs must be 1-D or 2-D, got " +
                      to_string(probs.shape()));
  const std::int64_t n = probs.size(-1);
  if (n == 0) throw invalid_argument("kiln::multinomial: probs has no categories");
  if (num_samples <= 0)
    throw invalid_argument("kiln::multinomial: num_samples must be positive, got " +
                           std::to_string(num_samples));
  if (!replacement && num_samples > n)
    throw invalid_argument("kiln::multinomial: " + std::to_string(num_samples) +
                           " samples without replacement from " + std::to_string(n) +
                           " categories");
  no_grad off;
  const device& dev = probs.get_device();
  const tensor w = probs.dim() == 1 ? probs.reshape({1, n}) : probs;
  const std::int64_t rows = w.size(0);
  const shape_t out_shape = probs.dim() == 1 ? shape_t{num_samples} : shape_t{rows, num_samples};
  if (rows == 0) return tensor::zeros(dev, out_shape, scalar_type::i64);
  check_weights(w, num_samples, replacement);
  const scalar_type ct = dev.supports(feature::fp64) ? scalar_type::f64 : scalar_type::f32;
  if (replacement) {
    const tensor wc = detail::contiguous_of(w);
    const tensor u = tensor::rand(dev, {rows, num_samples}, seed, ct);
    auto out = detail::allocate_tensor(dev, {rows, num_samples}, scalar_type::i64);
    detail::launch_draws(*out, *wc.impl(), *u.impl(), rows, n, num_samples);
    return tensor(std::move(out)).reshape(out_shape);
  }
  // The exponential race: E / w with E = -log(1 - u) ~ Exp(1); the smallest keys, in order,
  // are a draw without replacement. Zero weights get NaN keys, which rank last.
  const tensor u = tensor::rand(dev, {rows, n}, seed, ct), wt = w.to(ct);
  tensor keys;
  if (ct == scalar_type::f64)
    keys = where(wt > 0.0, -log(1.0 - u) / wt, std::numeric_limits<double>::quiet_NaN());
  else
    keys = where(wt > 0.f, -log(1.f - u) / wt, std::numeric_limits<float>::quiet_NaN());
  return topk(keys, num_samples, -1, false).indices.reshape(out_shape);
}

}  // namespace kiln
