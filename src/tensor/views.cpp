// Views: new shape, strides and offset over the same storage, no copy. A lazy tensor is
// evaluated first (its one kernel), then viewed.
#include <algorithm>

#include "autograd/derivatives.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;

// The stored tensor behind t, evaluating it when lazy.
const tensor_impl& stored(const tensor& t, const char* what) {
  tensor_impl& x = detail::impl_of(t, what);
  if (x.kind != detail::tensor_kind::stored) {
    detail::reset_stats();
    detail::materialise(x);
  }
  return x;
}

tensor with(const tensor_impl& x, shape_t shape, shape_t strides, std::int64_t offset) {
  auto v = std::make_shared<tensor_impl>();
  v->dev = x.dev;
  v->dtype = x.dtype;
  v->shape = std::move(shape);
  v->mem = x.mem;
  v->strides = std::move(strides);
  v->offset = offset;
  v->automatic = x.automatic;  // a view of an automatic tensor is automatic
  return tensor(std::move(v));
}

// A view v of x, recorded as a reshape when x needs a gradient.
tensor reshaped(const char* name, const tensor& x, const tensor& v) {
  return detail::grad_wanted({&x}) ? detail::grad::reshape_view(name, x, v) : v;
}

}  // namespace

tensor tensor::view(const shape_t& shape) const {
  const tensor_impl& x = stored(*this, "view");
  const shape_t s = detail::infer_shape(shape, numel(), x.shape, "view");
  if (!is_contiguous())
    throw shape_error("kiln::tensor::view: the tensor of shape " + to_string(x.shape) +
                      " and strides " + to_string(x.strides) +
                      " is not contiguous; reshape() copies it");
  return reshaped("view", *this, with(x, s, detail::contiguous_strides(s), x.offset));
}

tensor tensor::reshape(const shape_t& shape) const {
  detail::reset_stats();  // counts its evaluation and its copy together
  stored(*this, "reshape");
  detail::infer_shape(shape, numel(), this->shape(), "reshape");  // its errors before a copy
  tensor v;
  {
    no_grad off;
    v = is_contiguous() ? view(shape) : detail::contiguous_of(*this).view(shape);
  }
  return reshaped("reshape", *this, v);
}

tensor tensor::permute(const std::vector<int>& dims) const {
  const tensor_impl& x = stored(*this, "permute");
  const int rank = dim();
  if (static_cast<int>(dims.size()) != rank)
    throw axis_error("kiln::tensor::permute: " + std::to_string(dims.size()) +
                     " dimensions given for a tensor of rank " + std::to_string(rank));
  shape_t s(dims.size()), st(dims.size());
  std::vector<bool> used(dims.size());
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const auto d = static_cast<std::size_t>(detail::normalise_axis(dims[k], rank, "permute"));
    if (used[d])
      throw axis_error("kiln::tensor::permute: dimension " + std::to_string(d) + " repeated");
    used[d] = true;
    s[k] = x.shape[d];
    st[k] = x.strides[d];
  }
  const tensor v = with(x, s, st, x.offset);
  return detail::grad_wanted({this}) ? detail::grad::permute_view(*this, dims, v) : v;
}

tensor tensor::transpose(int a, int b) const {
  const int rank = dim();
  std::vector<int> p(static_cast<std::size_t>(rank));
  for (int k = 0; k < rank; ++k) p[static_cast<std::size_t>(k)] = k;
  if (rank == 0) return permute(p);
  std::swap(p[static_cast<std::size_t>(detail::normalise_axis(a, rank, "transpose"))],
            p[static_cast<std::size_t>(detail::normalise_axis(b, rank, "transpose"))]);
  return permute(p);
}

tensor tensor::t() const {
  if (dim() > 2)
    throw shape_error("kiln::tensor::t: expects at most 2 dimensions, the tensor has shape " +
                      to_string(shape()) + "; use transpose(a, b)");
  return dim() < 2
             ? reshaped("t", *this, with(stored(*this, "t"), shape(), strides(), storage_offset()))
             : transpose(0, 1);
}

tensor tensor::slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step) const {
  const tensor_impl& x = stored(*this, "slice");
  const auto d = static_cast<std::size_t>(detail::normalise_axis(dim, this->dim(), "slice"));
  if (step < 1)
    throw invalid_argument("kiln::tensor::slice: step must be at least 1, got " +
                           std::to_string(step));
  if (x.shape.empty()) throw axis_error("kiln::tensor::slice: a rank-0 tensor has no dimension");
  const std::int64_t size = x.shape[d];
  const auto clampi = [&](std::int64_t v) {
    return std::clamp<std::int64_t>(v < 0 ? v + size : v, 0, size);
  };
  const std::int64_t lo = clampi(start), hi = clampi(end);
  shape_t s = x.shape, st = x.strides;
  s[d] = hi > lo ? (hi - lo + step - 1) / step : 0;
  st[d] = x.strides[d] * step;
  const tensor v = with(x, s, st, x.offset + (s[d] ? lo * x.strides[d] : 0));
  return detail::grad_wanted({this})
             ? detail::grad::slice_view(*this, static_cast<int>(d), lo, step, v)
             : v;
}

tensor tensor::expand(const shape_t& shape) const {
  const tensor_impl& x = stored(*this, "expand");
  if (shape.size() > static_cast<std::size_t>(max_tensor_rank))
    detail::check_shape(shape, "expand");
  const auto fail = [&] {
    throw shape_error("kiln::tensor::expand: shape " + to_string(x.shape) + " cannot expand to " +
                      to_string(shape));
  };
  if (shape.size() < x.shape.size()) fail();
  const std::size_t lead = shape.size() - x.shape.size();
  shape_t s(shape.size()), st(shape.size());
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (k < lead) {
      if (shape[k] < 0) fail();
      s[k] = shape[k];
      st[k] = 0;
      continue;
    }
    const std::int64_t have = x.shape[k - lead], want = shape[k] == -1 ? have : shape[k];
    if (want == have) {
      s[k] = have;
      st[k] = x.strides[k - lead];
    } else if (have == 1) {
      s[k] = want;
      st[k] = 0;
    } else {
      fail();
    }
  }
  detail::check_shape(s, "expand");  // a size-1 dim expanded to -5, or sizes overflowing int64
  const tensor v = with(x, s, st, x.offset);
  return detail::grad_wanted({this}) ? detail::grad::expand_view(*this, v) : v;
}

tensor tensor::squeeze() const {
  const tensor_impl& x = stored(*this, "squeeze");
  shape_t s, st;
  for (std::size_t k = 0; k < x.shape.size(); ++k)
    if (x.shape[k] != 1) {
      s.push_back(x.shape[k]);
      st.push_back(x.strides[k]);
    }
  return reshaped("squeeze", *this, with(x, s, st, x.offset));
}

tensor tensor::squeeze(int dim) const {
  const tensor_impl& x = stored(*this, "squeeze");
  if (x.shape.empty()) return reshaped("squeeze", *this, with(x, {}, {}, x.offset));
  const auto d = static_cast<std::size_t>(detail::normalise_axis(dim, this->dim(), "squeeze"));
  if (x.shape[d] != 1) return reshaped("squeeze", *this, with(x, x.shape, x.strides, x.offset));
  shape_t s = x.shape, st = x.strides;
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(d));
  return reshaped("squeeze", *this, with(x, s, st, x.offset));
}

tensor tensor::unsqueeze(int dim) const {
  const tensor_impl& x = stored(*this, "unsqueeze");
  const int rank = this->dim();
  if (dim < -(rank + 1) || dim > rank)
    throw axis_error("kiln::tensor::unsqueeze: dimension " + std::to_string(dim) +
                     " is out of range for a tensor of rank " + std::to_string(rank) +
                     " (expected [" + std::to_string(-(rank + 1)) + ", " + std::to_string(rank) +
                     "])");
  const auto d = static_cast<std::size_t>(dim < 0 ? dim + rank + 1 : dim);
  shape_t s = x.shape, st = x.strides;
  const std::int64_t stride = d < s.size() ? s[d] * st[d] : 1;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(d), 1);
  st.insert(st.begin() + static_cast<std::ptrdiff_t>(d), stride);
  detail::check_shape(s, "unsqueeze");
  return reshaped("unsqueeze", *this, with(x, s, st, x.offset));
}

tensor tensor::contiguous() const {
  detail::reset_stats();
  const tensor c = detail::contiguous_of(*this);
  return c.impl() == impl() ? c : reshaped("contiguous", *this, c);
}

namespace detail {
tensor contiguous_of(const tensor& t) {
  tensor_impl& x = impl_of(t, "contiguous");
  if (x.kind != tensor_kind::stored) {
    materialise(x);
    return t;
  }
  if (t.is_contiguous()) return t;
  tensor c = copy_node(t);
  materialise(*c.impl());
  return c;
}
}  // namespace detail

}  // namespace kiln
