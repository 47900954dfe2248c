#include "optim/flat.hpp"

#include <vector>

#include "runtime/runtime.hpp"

namespace kiln::optim::detail {
namespace {

kiln::detail::queue_impl& queue_of(const group& g) { return *g.dev.default_queue().impl(); }

std::uint64_t bytes(const group& g, std::int64_t elements) {
  return static_cast<std::uint64_t>(elements) * size_of(g.dtype);
}

}  // namespace

void fill_value(const group& g, kiln::detail::memory_impl& dst, std::int64_t offset,
                std::int64_t count, double value) {
  if (count <= 0) return;
  const float f = static_cast<float>(value);
  const bool f64 = g.dtype == scalar_type::f64;
  kiln::detail::fill(
      queue_of(g), dst, bytes(g, offset), f64 ? static_cast<const void*>(&value) : &f,
      static_cast<std::uint32_t>(size_of(g.dtype)), static_cast<std::uint64_t>(count));
}

void write_slot(const group& g, kiln::detail::memory_impl& dst, std::int64_t offset,
                const tensor& src) {
  tensor v = src.dtype() == g.dtype ? src : src.to(g.dtype);
  const std::int64_t n = v.numel();
  if (n == 0) return;
  if (!(v.get_device() == g.dev)) {  // through the host
    std::vector<unsigned char> host(bytes(g, n));
    kiln::detail::tensor_read(v, g.dtype, host.data(), static_cast<std::uint64_t>(n));
    kiln::detail::copy_h2d(queue_of(g), dst, bytes(g, offset), host.data(), host.size());
    // The copy may still be reading `host` (asynchronous on OpenCL): wait before it goes.
    g.dev.default_queue().finish();
    return;
  }
  v = kiln::detail::contiguous_of(v);
  const kiln::detail::tensor_impl& c = *v.impl();
  if (c.mem.get() == &dst && c.offset == offset) return;  // already there
  kiln::detail::copy_d2d(queue_of(g), dst, bytes(g, offset), *c.mem, bytes(g, c.offset),
                         bytes(g, n));
}

tensor read_slot(const group& g, kiln::detail::memory_impl& src, std::int64_t offset,
                 const shape_t& shape) {
  auto t = kiln::detail::allocate_tensor(g.dev, shape, g.dtype);
  const std::int64_t n = kiln::detail::numel_of(shape);
  if (n > 0) kiln::detail::copy_d2d(queue_of(g), *t->mem, 0, src, bytes(g, offset), bytes(g, n));
  return tensor(std::move(t));
}

}  // namespace kiln::optim::detail
