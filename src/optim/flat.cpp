#include "optim/flat.hpp"

#include <cstring>
#include <vector>

#include "kiln/half.hpp"
#include "runtime/runtime.hpp"

namespace kiln::optim::detail {
namespace {

kiln::detail::queue_impl& queue_of(const group& g) { return *g.dev.default_queue().impl(); }

std::uint64_t bytes(scalar_type t, std::int64_t elements) {
  return static_cast<std::uint64_t>(elements) * size_of(t);
}

}  // namespace

void fill_value(const group& g, scalar_type t, kiln::detail::memory_impl& dst, std::int64_t offset,
                std::int64_t count, double value) {
  if (count <= 0) return;
  unsigned char pattern[8] = {};
  if (t == scalar_type::f64) {
    std::memcpy(pattern, &value, 8);
  } else if (t == scalar_type::f32) {
    const float f = static_cast<float>(value);
    std::memcpy(pattern, &f, 4);
  } else if (t == scalar_type::bf16) {
    const bfloat16 b(value);
    std::memcpy(pattern, &b, 2);
  } else if (t == scalar_type::f16) {
    const half h(value);
    std::memcpy(pattern, &h, 2);
  } else {  // make_optimizer admits floating types only
    throw dtype_error("kiln::optim: no fill of " + std::string(type_name(t)) + " buffers");
  }
  kiln::detail::fill(queue_of(g), dst, bytes(t, offset), pattern,
                     static_cast<std::uint32_t>(size_of(t)), static_cast<std::uint64_t>(count));
}

void write_slot(const group& g, scalar_type t, kiln::detail::memory_impl& dst, std::int64_t offset,
                const tensor& src) {
  tensor v = src.dtype() == t ? src : src.to(t);
  const std::int64_t n = v.numel();
  if (n == 0) return;
  if (!(v.get_device() == g.dev)) {  // through the host
    std::vector<unsigned char> host(bytes(t, n));
    kiln::detail::tensor_read(v, t, host.data(), static_cast<std::uint64_t>(n));
    kiln::detail::copy_h2d(queue_of(g), dst, bytes(t, offset), host.data(), host.size());
    // The copy may still be reading `host` (asynchronous on OpenCL): wait before it goes.
    g.dev.default_queue().finish();
    return;
  }
  v = kiln::detail::contiguous_of(v);
  const kiln::detail::tensor_impl& c = *v.impl();
  if (c.mem.get() == &dst && c.offset == offset) return;  // already there
  kiln::detail::copy_d2d(queue_of(g), dst, bytes(t, offset), *c.mem, bytes(t, c.offset),
                         bytes(t, n));
}

tensor read_slot(const group& g, scalar_type t, kiln::detail::memory_impl& src, std::int64_t offset,
                 const shape_t& shape) {
  auto r = kiln::detail::allocate_tensor(g.dev, shape, t);
  const std::int64_t n = kiln::detail::numel_of(shape);
  if (n > 0) kiln::detail::copy_d2d(queue_of(g), *r->mem, 0, src, bytes(t, offset), bytes(t, n));
  return tensor(std::move(r));
}

}  // namespace kiln::optim::detail
