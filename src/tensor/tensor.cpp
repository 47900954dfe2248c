// The kiln::tensor handle: properties, creation from host data and constants, reading back.
#include "kiln/tensor.hpp"

#include "runtime/runtime.hpp"
#include "tensor/convert.hpp"
#include "tensor/placement.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace detail {
namespace {
thread_local tensor_stats t_stats;
}
tensor_stats& stats_now() { return t_stats; }
void reset_stats() { t_stats = {}; }

std::int64_t numel_of(const shape_t& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

shape_t contiguous_strides(const shape_t& s) {
  shape_t st(s.size());
  std::int64_t acc = 1;
  for (std::size_t k = s.size(); k-- > 0;) {
    st[k] = acc;
    acc *= std::max<std::int64_t>(s[k], 1);
  }
  return st;
}

std::shared_ptr<tensor_impl> share_storage(const tensor_impl& x) {
  auto v = std::make_shared<tensor_impl>();
  v->dev = x.dev;
  v->dtype = x.dtype;
  v->shape = x.shape;
  v->mem = x.mem;
  v->strides = x.strides;
  v->offset = x.offset;
  return v;
}

tensor_impl& impl_of(const tensor& t, const char* what) {
  if (!t.impl())
    throw invalid_argument(std::string("kiln::tensor::") + what + ": the tensor is undefined");
  return *t.impl();
}

void check_float_operands(const char* fn,
                          std::initializer_list<std::pair<const char*, const tensor*>> xs,
                          bool reduced) {
  const tensor_impl* first = nullptr;
  const char* first_name = nullptr;
  const tensor_impl* pinned = nullptr;  // the first fixed operand (automatic ones follow it)
  const char* pinned_name = nullptr;
  for (const auto& [name, t] : xs) {
    if (!t->impl())
      throw invalid_argument(std::string("kiln::") + fn + ": " + name + " is undefined");
    const tensor_impl& x = *t->impl();
    if (!first) {
      first = &x;
      first_name = name;
    }
    if (x.automatic) continue;
    if (!pinned) {
      pinned = &x;
      pinned_name = name;
    }
    if (!(x.dev == pinned->dev))
      throw device_mismatch(std::string("kiln::") + fn +
                            ": operands are on different devices: " + pinned_name + " on " +
                            pinned->dev.id() + ", " + name + " on " + x.dev.id());
  }
  for (const auto& [name, t] : xs) {
    const scalar_type d = t->impl()->dtype;
    if (d != scalar_type::f32 && d != scalar_type::f64 && !(reduced && is_reduced_float(d)))
      throw dtype_error(std::string("kiln::") + fn + ": " + name + " has dtype " + type_name(d) +
                        (reduced ? "; only float, double, half and bfloat16 are supported"
                                 : "; only float and double are supported"));
    if (d != first->dtype)
      throw dtype_error(std::string("kiln::") + fn + ": operands have different dtypes: " +
                        first_name + " is " + type_name(first->dtype) + ", " + name + " is " +
                        type_name(d) + " (convert one with to())");
  }
}

std::shared_ptr<tensor_impl> allocate_tensor(const device& dev, const shape_t& shape,
                                             scalar_type dtype) {
  check_shape(shape, "allocate");
  auto t = std::make_shared<tensor_impl>();
  t->dev = dev;
  t->dtype = dtype;
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  const auto n = static_cast<std::uint64_t>(numel_of(shape));
  if (n > UINT64_MAX / size_of(dtype))  // n * size wrapping would allocate a few bytes
    throw shape_error("kiln::tensor::allocate: shape " + to_string(shape) + " of " +
                      type_name(dtype) + " needs more than 2^64 bytes");
  t->mem = allocate(dev, std::max<std::uint64_t>(n * size_of(dtype), 1));
  return t;
}

tensor tensor_from_host(const device& dev, scalar_type t, const void* data, std::uint64_t count,
                        const shape_t& shape) {
  check_shape(shape, "from");
  if (static_cast<std::uint64_t>(numel_of(shape)) != count)
    throw shape_error("kiln::tensor::from: shape " + to_string(shape) + " and the data's shape " +
                      to_string(shape_t{static_cast<std::int64_t>(count)}) +
                      " differ in number of elements");
  auto x = allocate_tensor(dev, shape, t);
  if (count) {
    queue& q = dev.default_queue();
    copy_h2d(*q.impl(), *x->mem, 0, data, count * size_of(t));
    q.finish();
  }
  return tensor(std::move(x));
}

tensor full_bits(const device& dev, const shape_t& shape, scalar_type dtype, scalar_type from,
                 std::uint64_t bits) {
  auto x = allocate_tensor(dev, shape, dtype);
  const auto n = static_cast<std::uint64_t>(numel_of(shape));
  if (n) {
    const std::uint64_t v = convert_bits(from, bits, dtype);
    queue& q = dev.default_queue();
    fill(*q.impl(), *x->mem, 0, &v, static_cast<std::uint32_t>(size_of(dtype)), n);
    // Ready for any queue on return, except while a step is captured on the default queue
    // (kiln::step_graph): the fill is then the graph's, ordered with the work that reads it.
    if (!dev.impl()->capture_active.load(std::memory_order_acquire)) q.finish();
  }
  return tensor(std::move(x));
}

void tensor_read(const tensor& x, scalar_type want, void* dst, std::uint64_t count) {
  tensor_impl& t = impl_of(x, "to_vector");
  if (t.dtype != want)
    throw dtype_error(std::string("kiln::tensor: reading a tensor of dtype ") + type_name(t.dtype) +
                      " as " + type_name(want) +
                      " (to_vector<T> and item<T> need T to be the tensor's dtype; use to())");
  const auto n = static_cast<std::uint64_t>(numel_of(t.shape));
  if (n != count)
    throw shape_error("kiln::tensor::item: the tensor of shape " + to_string(t.shape) + " has " +
                      std::to_string(n) + " elements, not 1");
  reset_stats();
  tensor c;
  if (t.kind == tensor_kind::stored && t.automatic) {
    const placed here(t.dev, true);  // a copy made for reading runs where the tensor is
    c = contiguous_of(x);
  } else {
    c = contiguous_of(x);
  }
  if (!n) return;
  const tensor_impl& s = *c.impl();
  finish_users(*s.mem);
  queue& q = s.dev.default_queue();
  copy_d2h(*q.impl(), dst, *s.mem, static_cast<std::uint64_t>(s.offset) * size_of(s.dtype),
           n * size_of(s.dtype));
  q.finish();
}

}  // namespace detail

tensor_stats last_tensor_stats() { return detail::t_stats; }

tensor tensor::empty(const device& dev, const shape_t& shape, scalar_type dtype) {
  return tensor(detail::allocate_tensor(dev, shape, dtype));
}
tensor tensor::zeros(const device& dev, const shape_t& shape, scalar_type dtype) {
  return full(dev, shape, dtype, 0);
}
tensor tensor::ones(const device& dev, const shape_t& shape, scalar_type dtype) {
  return full(dev, shape, dtype, 1);
}

std::int64_t tensor::numel() const { return detail::numel_of(shape()); }
int tensor::dim() const { return static_cast<int>(shape().size()); }
const shape_t& tensor::shape() const { return detail::impl_of(*this, "shape").shape; }
std::int64_t tensor::size(int d) const {
  return shape()[static_cast<std::size_t>(detail::normalise_axis(d, dim(), "size"))];
}
shape_t tensor::strides() const {
  const detail::tensor_impl& t = detail::impl_of(*this, "strides");
  return t.kind == detail::tensor_kind::stored ? t.strides : detail::contiguous_strides(t.shape);
}
std::int64_t tensor::storage_offset() const {
  const detail::tensor_impl& t = detail::impl_of(*this, "storage_offset");
  return t.kind == detail::tensor_kind::stored ? t.offset : 0;
}
scalar_type tensor::dtype() const { return detail::impl_of(*this, "dtype").dtype; }
const device& tensor::get_device() const { return detail::impl_of(*this, "device").dev; }
bool tensor::is_lazy() const {
  return detail::impl_of(*this, "is_lazy").kind != detail::tensor_kind::stored;
}
bool tensor::is_contiguous() const {
  const shape_t s = strides();
  std::int64_t expect = 1;
  for (std::size_t k = s.size(); k-- > 0;) {
    if (shape()[k] != 1 && s[k] != expect) return numel() == 0;
    expect *= shape()[k];
  }
  return true;
}

const tensor& tensor::eval() const {
  detail::reset_stats();
  detail::materialise(detail::impl_of(*this, "eval"));
  return *this;
}

}  // namespace kiln
