// The indexing operations of kiln/tensor/indexing.hpp: checks, index-range checks (deferred on
// accelerators: no host wait), output shapes, then the generated kernels of indexing_kernels.cpp
// (gather-likes, cat) or lazy elementwise nodes (masked_fill, tril, triu);
// autograd/derivatives_index.cpp records them.
#include "kiln/tensor/indexing.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "autograd/derivatives.hpp"
#include "autograd/derivatives_index.hpp"
#include "kiln/buffer.hpp"
#include "tensor/build.hpp"
#include "tensor/convert.hpp"
#include "tensor/deferred_check.hpp"
#include "tensor/indexing_kernels.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;

std::string name(const char* fn) { return std::string("kiln::") + fn; }

const tensor& defined(const char* fn, const char* what, const tensor& t) {
  if (!t.defined()) throw invalid_argument(name(fn) + ": " + what + " is undefined");
  return t;
}

void check_device(const char* fn, const tensor& a, const char* an, const tensor& b,
                  const char* bn) {
  if (!(a.get_device() == b.get_device()))
    throw device_mismatch(name(fn) + ": " + an + " is on " + a.get_device().id() + ", " + bn +
                          " on " + b.get_device().id());
}

// index: defined, int32 or int64, on x's device.
void check_index(const char* fn, const tensor& x, const tensor& index) {
  defined(fn, "index", index);
  const scalar_type t = index.dtype();
  if (t != scalar_type::i32 && t != scalar_type::i64)
    throw dtype_error(name(fn) + ": indices must be int32 or int64, got " + type_name(t));
  check_device(fn, x, "the input", index, "the indices");
}

std::atomic<std::uint64_t> check_reads{0};

std::string out_of_range(const char* fn, std::int64_t n, std::int64_t bound) {
  return name(fn) + ": " + std::to_string(n) + " index(es) out of range [0, " +
         std::to_string(bound) + ")";
}

// Every index in [0, bound), checked at once: one fused count read back; the first bad value
// is found on the host only when there is one.
void check_range_now(const char* fn, const tensor& bad, const tensor& index, std::int64_t bound) {
  ++check_reads;
  const auto n = bad.item<std::int64_t>();
  if (n == 0) return;
  const std::vector<std::int64_t> v = index.to(scalar_type::i64).to_vector<std::int64_t>();
  std::size_t at = 0;
  while (at < v.size() && v[at] >= 0 && v[at] < bound) ++at;
  throw invalid_argument(out_of_range(fn, n, bound) + ", the first " + std::to_string(v.at(at)) +
                         " at flat position " + std::to_string(at));
}

// Every index in [0, bound): at once on the host device; elsewhere without a host wait, reported
// by a later call (deferred_check.hpp). Meanwhile the kernels stay inside the tensors (a bad
// index gathers zeros and adds nothing to a gradient).
void check_range(const char* fn, const tensor& index, std::int64_t bound) {
  if (index.numel() == 0) return;
  no_grad off;
  const tensor bad = ((index < std::int64_t{0}) + (index >= bound)).sum().to(scalar_type::i64);
  if (index.get_device() == device::host() ||
      !detail::defer_count_check(
          bad, [fn, bound](std::int64_t n) { return out_of_range(fn, n, bound); }))
    check_range_now(fn, bad, index, bound);
}

// A stored handle of t (a lazy t is evaluated into new contiguous storage).
tensor stored(const tensor& t) {
  if (!t.is_lazy()) return t;
  no_grad off;
  return detail::contiguous_of(t);
}

std::shared_ptr<tensor_impl> output(const tensor& like, const shape_t& shape, scalar_type t) {
  return detail::allocate_tensor(like.get_device(), shape, t);
}

std::int64_t prod(const shape_t& s, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t d = from; d < to; ++d) p *= s[d];
  return p;
}

// index stored, 0-D or 1-D.
tensor index_select_forward(const tensor& x, int d, const tensor& index) {
  shape_t shape = x.shape();
  shape[std::size_t(d)] = index.numel();
  auto out = output(x, shape, x.dtype());
  shape_t is(shape.size(), 0);
  is[std::size_t(d)] = index.dim() ? index.strides()[0] : 0;
  detail::launch_gather(*out, *x.impl(), *index.impl(), d, x.strides(), is,
                        x.strides()[std::size_t(d)], x.size(d));
  return tensor(std::move(out));
}

// gather and scatter_add's shape rules: equal ranks, index.size(e) <= limit.size(e) for e
// (except dim when skip_dim).
void check_sizes(const char* fn, const tensor& index, const tensor& limit, const char* what,
                 int dim, bool skip_dim) {
  if (index.dim() != limit.dim())
    throw shape_error(name(fn) + ": index " + to_string(index.shape()) + " and " + what + " " +
                      to_string(limit.shape()) + " must have the same number of dims");
  for (int e = 0; e < index.dim(); ++e)
    if (!(skip_dim && e == dim) && index.size(e) > limit.size(e))
      throw shape_error(name(fn) + ": index " + to_string(index.shape()) + " is larger than " +
                        what + " " + to_string(limit.shape()) + " in dim " + std::to_string(e));
}

tensor gather_forward(const tensor& x0, int dim, const tensor& index0) {
  const tensor x = stored(defined("gather", "the input", x0));
  check_index("gather", x, index0);
  if (x.dim() == 0) throw shape_error("kiln::gather: the input must have at least 1 dim");
  const int d = detail::normalise_axis(dim, x.dim(), "kiln::gather");
  check_sizes("gather", index0, x, "the input", d, true);
  const tensor index = stored(index0);
  check_range("gather", index, x.size(d));
  auto out = output(x, index.shape(), x.dtype());
  detail::launch_gather(*out, *x.impl(), *index.impl(), d, x.strides(), index.strides(),
                        x.strides()[std::size_t(d)], x.size(d));
  return tensor(std::move(out));
}

// cond ? a : x in x's dtype (kiln::where promotes bool operands to int), over x's shape.
tensor select_keep(const tensor& cond, const tensor& a, const tensor& x) {
  using namespace detail;
  const impl_ptr c = checked(cond, "select"), v = checked(a, "select"), y = checked(x, "select");
  const tensor r(node(ir::op::select, y->dtype, y->shape, {c, cast_to(v, y->dtype), y}));
  return grad_wanted({&x}) ? grad::where(cond, a, x, r) : r;
}

}  // namespace

namespace detail {

std::uint64_t index_check_reads() { return check_reads.load(); }

sort_keyed_index sort_keys_of(const tensor& index, std::int64_t rows) {
  const std::int64_t n = index.numel(), m = std::max<std::int64_t>(n, 1);
  const device& dev = index.get_device();
  sort_keyed_index k{tensor(allocate_tensor(dev, {m}, index_key_type(rows))),
                     tensor(allocate_tensor(dev, {m}, index_position_type(n))), n};
  launch_sort_keys(*k.keys.impl(), *k.pos.impl(), *index.impl(),
                   index.dim() ? index.strides()[0] : 0, n, rows);
  return k;
}

tensor index_add_rows(const tensor& g0, int dim, const sort_keyed_index& index, const shape_t& xs) {
  const tensor g = detail::contiguous_of(g0);
  const std::size_t d = std::size_t(dim);
  auto dx = allocate_tensor(g.get_device(), xs, g.dtype());
  launch_index_add(*dx, *g.impl(), *index.keys.impl(), *index.pos.impl(), prod(xs, 0, d), xs[d],
                   index.n, prod(xs, d + 1, xs.size()));
  return tensor(std::move(dx));
}

void place_along(const tensor& out, const tensor& g0, int dim, std::int64_t start) {
  if (g0.numel() == 0) return;
  const tensor g = detail::contiguous_of(g0);
  const shape_t& xs = out.shape();
  const std::size_t d = std::size_t(dim);
  launch_place(*out.impl(), *g.impl(), prod(xs, 0, d), xs[d], g.size(dim), start,
               prod(xs, d + 1, xs.size()));
}

tensor scatter_add_into(const tensor& x0, int dim, const tensor& index0, const tensor& src0,
                        const shape_t& shape) {
  const tensor x = x0.defined() ? stored(x0) : x0, index = stored(index0), src = stored(src0);
  auto out = allocate_tensor(src.get_device(), shape, src.dtype());
  launch_scatter(*out, x.defined() ? x.impl().get() : nullptr, *index.impl(), *src.impl(), dim);
  return tensor(std::move(out));
}

tensor masked_fill_bits(const tensor& x, const tensor& mask, scalar_type from, std::uint64_t bits) {
  defined("masked_fill", "the input", x);
  defined("masked_fill", "the mask", mask);
  if (mask.dtype() != scalar_type::boolean)
    throw dtype_error("kiln::masked_fill: the mask must be bool, got " +
                      std::string(type_name(mask.dtype())));
  check_device("masked_fill", x, "the input", mask, "the mask");
  if (broadcast_shapes(x.shape(), mask.shape()) != x.shape())
    throw shape_error("kiln::masked_fill: the mask " + to_string(mask.shape()) +
                      " does not broadcast to the input " + to_string(x.shape()));
  const tensor value = scalar_like(x, x.dtype(), convert_bits(from, bits, x.dtype()));
  return select_keep(mask, value, x);
}

}  // namespace detail

namespace {

// x where column - row <= k (lower) or >= k (upper) over its last two dims, zero elsewhere.
tensor triangle(const char* fn, const tensor& x, std::int64_t k, bool lower) {
  defined(fn, "the input", x);
  if (x.dim() < 2)
    throw shape_error(name(fn) + ": expects at least 2 dims, got " + to_string(x.shape()));
  const std::int64_t rows = x.size(-2), cols = x.size(-1);
  const device& dev = x.get_device();
  // Column and row numbers generated on the device (no host copy), read broadcast.
  const tensor diff = tensor::arange(dev, 0, double(cols), 1, scalar_type::i64) -
                      tensor::arange(dev, 0, double(rows), 1, scalar_type::i64).view({rows, 1});
  const tensor drop = lower ? diff > k : diff < k;
  return select_keep(drop, detail::scalar_like(x, x.dtype(), 0), x);
}

}  // namespace

tensor tril(const tensor& x, std::int64_t k) { return triangle("tril", x, k, true); }
tensor triu(const tensor& x, std::int64_t k) { return triangle("triu", x, k, false); }

namespace {
// index_select, with errors named after fn (embedding calls it too).
tensor select_rows(const char* fn, const tensor& x0, int dim, const tensor& index) {
  const tensor x = stored(defined(fn, "the input", x0));
  check_index(fn, x, index);
  if (x.dim() == 0) throw shape_error(name(fn) + ": the input must have at least 1 dim");
  if (index.dim() > 1)
    throw shape_error(name(fn) + ": index must be 0-D or 1-D, got " + to_string(index.shape()));
  const int d = detail::normalise_axis(dim, x.dim(), "kiln::index_select");
  const tensor idx = stored(index);
  check_range(fn, idx, x.size(d));
  const tensor r = index_select_forward(x, d, idx);
  if (!detail::grad_wanted({&x0})) return r;
  return detail::grad::index_select(x0, d, detail::sort_keys_of(idx, x.size(d)), r);
}
}  // namespace

tensor index_select(const tensor& x, int dim, const tensor& index) {
  return select_rows("index_select", x, dim, index);
}

tensor embedding(const tensor& weight, const tensor& indices) {
  defined("embedding", "the weight", weight);
  if (weight.dim() != 2)
    throw shape_error("kiln::embedding: the weight must be [num_embeddings, dim], got " +
                      to_string(weight.shape()));
  check_index("embedding", weight, indices);
  shape_t shape = indices.shape();
  shape.push_back(weight.size(1));
  const tensor flat = indices.reshape({indices.numel()});
  return select_rows("embedding", weight, 0, flat).reshape(shape);
}

tensor gather(const tensor& x, int dim, const tensor& index) {
  const tensor r = gather_forward(x, dim, index);
  if (!detail::grad_wanted({&x})) return r;
  return detail::grad::gather(x, detail::normalise_axis(dim, x.dim(), "gather"), index, r);
}

tensor scatter_add(const tensor& x, int dim, const tensor& index, const tensor& src) {
  defined("scatter_add", "the input", x);
  defined("scatter_add", "src", src);
  check_index("scatter_add", x, index);
  check_device("scatter_add", x, "the input", src, "src");
  if (src.dtype() != x.dtype())
    throw dtype_error("kiln::scatter_add: src is " + std::string(type_name(src.dtype())) +
                      ", the input " + type_name(x.dtype()) + "; they must match");
  if (x.dtype() == scalar_type::boolean)
    throw dtype_error("kiln::scatter_add: bool tensors cannot be summed");
  if (x.dim() == 0) throw shape_error("kiln::scatter_add: the input must have at least 1 dim");
  const int d = detail::normalise_axis(dim, x.dim(), "kiln::scatter_add");
  check_sizes("scatter_add", index, x, "the input", d, true);
  check_sizes("scatter_add", index, src, "src", d, false);
  check_range("scatter_add", stored(index), x.size(d));
  const tensor r = [&] {
    no_grad off;
    return detail::scatter_add_into(x, d, index, src, x.shape());
  }();
  if (!detail::grad_wanted({&x, &src})) return r;
  return detail::grad::scatter_add(x, d, index, src, r);
}

tensor cat(const std::vector<tensor>& xs, int dim) {
  if (xs.empty()) throw invalid_argument("kiln::cat: expects at least one tensor");
  for (const tensor& x : xs) defined("cat", "a tensor", x);
  const tensor& a = xs[0];
  if (a.dim() == 0) throw shape_error("kiln::cat: zero-dimensional tensors cannot be joined");
  const int d = detail::normalise_axis(dim, a.dim(), "kiln::cat");
  shape_t shape = a.shape();
  shape[std::size_t(d)] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const tensor& x = xs[i];
    const std::string which = "tensor " + std::to_string(i);
    if (x.dtype() != a.dtype())
      throw dtype_error("kiln::cat: " + which + " is " + type_name(x.dtype()) + ", tensor 0 " +
                        type_name(a.dtype()) + "; convert them to one dtype first");
    check_device("cat", a, "tensor 0", x, which.c_str());
    bool ok = x.dim() == a.dim();
    for (int e = 0; ok && e < a.dim(); ++e) ok = e == d || x.size(e) == a.size(e);
    if (!ok)
      throw shape_error("kiln::cat: " + which + " is " + to_string(x.shape()) + ", tensor 0 " +
                        to_string(a.shape()) + "; they must match except in dim " +
                        std::to_string(d));
    shape[std::size_t(d)] += x.size(d);
  }
  auto out = output(a, shape, a.dtype());
  const std::int64_t outer = prod(shape, 0, std::size_t(d)),
                     inner = prod(shape, std::size_t(d) + 1, shape.size());
  std::int64_t at = 0;
  for (const tensor& x : xs) {
    const std::int64_t n = x.size(d);
    if (n > 0 && outer > 0 && inner > 0) {
      no_grad off;
      const tensor s = detail::contiguous_of(x);
      detail::launch_place(*out, *s.impl(), outer, shape[std::size_t(d)], n, at, inner);
    }
    at += n;
  }
  const tensor r(std::move(out));
  bool want = false;
  for (const tensor& x : xs) want = want || detail::grad_wanted({&x});
  return want ? detail::grad::cat(xs, d, r) : r;
}

tensor stack(const std::vector<tensor>& xs, int dim) {
  if (xs.empty()) throw invalid_argument("kiln::stack: expects at least one tensor");
  for (const tensor& x : xs) defined("stack", "a tensor", x);
  const int d = detail::normalise_axis(dim, xs[0].dim() + 1, "kiln::stack");
  std::vector<tensor> u;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].shape() != xs[0].shape())
      throw shape_error("kiln::stack: tensor " + std::to_string(i) + " is " +
                        to_string(xs[i].shape()) + ", tensor 0 " + to_string(xs[0].shape()) +
                        "; they must be equal");
    u.push_back(xs[i].unsqueeze(d));
  }
  return cat(u, d);
}

std::vector<tensor> split(const tensor& x, const std::vector<std::int64_t>& sizes, int dim) {
  defined("split", "the input", x);
  if (x.dim() == 0) throw shape_error("kiln::split: the input must have at least 1 dim");
  const int d = detail::normalise_axis(dim, x.dim(), "kiln::split");
  std::int64_t sum = 0;
  for (std::int64_t s : sizes) {
    if (s < 0) throw invalid_argument("kiln::split: sizes must be non-negative");
    sum += s;
  }
  if (sum != x.size(d))
    throw shape_error("kiln::split: sizes sum to " + std::to_string(sum) + " but dim " +
                      std::to_string(d) + " of " + to_string(x.shape()) + " has " +
                      std::to_string(x.size(d)));
  const bool want = detail::grad_wanted({&x});
  const auto shared = want ? std::make_shared<detail::grad::split_gradient>() : nullptr;
  std::vector<tensor> r;
  std::int64_t at = 0;
  for (std::int64_t s : sizes) {
    tensor v;
    {
      no_grad off;
      v = x.slice(d, at, at + s);
    }
    r.push_back(want ? detail::grad::split_piece(x, d, at, v, shared) : v);
    at += s;
  }
  return r;
}

std::vector<tensor> split(const tensor& x, std::int64_t size, int dim) {
  defined("split", "the input", x);
  if (size <= 0) throw invalid_argument("kiln::split: the size must be positive");
  if (x.dim() == 0) throw shape_error("kiln::split: the input must have at least 1 dim");
  const std::int64_t n = x.size(dim);
  std::vector<std::int64_t> sizes;
  for (std::int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

}  // namespace kiln
