// Memory shared with other libraries without a copy: a tensor's address (data_ptr) and a
// tensor over memory someone else owns (from_external). Both need a backend that addresses
// its memory by pointer (mem_address: the CPU and CUDA); OpenCL's buffers have no address.
#include "runtime/runtime.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

// The backend's address of `ref`, or kiln::unsupported naming the operation and the device.
void* address_of(const std::shared_ptr<detail::device_impl>& dev, const std::string& id,
                 kiln_mem_ref ref, const char* fn) {
  void* out = nullptr;
  if (dev->api->mem_address(dev->handle(), ref, &out) == KILN_OK) return out;
  const char* why = dev->api->last_error();
  throw unsupported(std::string("kiln::tensor::") + fn + ": memory on " + id +
                    " has no address to share (" + (why ? why : "the backend says no") + ")");
}

}  // namespace

void* tensor::data_ptr() const {
  detail::tensor_impl& t = detail::impl_of(*this, "data_ptr");
  detail::materialise(t);
  t.dev.default_queue().finish();  // the values are there once the pointer is read
  const kiln_mem_ref ref{t.mem->handle, static_cast<std::uint64_t>(t.offset) * size_of(t.dtype)};
  return address_of(t.dev.impl(), t.dev.id(), ref, "data_ptr");
}

tensor tensor::from_external(const device& dev, void* data, const shape_t& shape, scalar_type dtype,
                             const shape_t& strides, std::function<void()> release) {
  if (!dev.impl()) throw invalid_argument("kiln::tensor::from_external: the device is empty");
  detail::check_shape(shape, "from_external");
  if (!strides.empty() && strides.size() != shape.size())
    throw shape_error("kiln::tensor::from_external: " + std::to_string(strides.size()) +
                      " strides for a shape of rank " + std::to_string(shape.size()));
  const shape_t st = strides.empty() ? detail::contiguous_strides(shape) : strides;
  const std::int64_t n = detail::numel_of(shape);
  std::uint64_t extent = n ? 1 : 0;  // elements from the first to one past the last
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (st[d] < 0)
      throw invalid_argument("kiln::tensor::from_external: stride " + std::to_string(st[d]) +
                             " of dimension " + std::to_string(d) + " is negative");
    if (n) extent += static_cast<std::uint64_t>(shape[d] - 1) * static_cast<std::uint64_t>(st[d]);
  }
  if (!data && n)
    throw invalid_argument("kiln::tensor::from_external: a null pointer for " + std::to_string(n) +
                           " elements");
  if (data) address_of(dev.impl(), dev.id(), kiln_mem_ref{data, 0}, "from_external");
  auto m = std::make_shared<detail::memory_impl>();
  m->dev = dev.impl();
  m->public_device = dev;
  m->handle = data;
  m->bytes = extent * size_of(dtype);
  m->gen = m->dev->generation.load(std::memory_order_acquire);
  m->external_release = release ? std::move(release) : [] {};
  auto t = std::make_shared<detail::tensor_impl>();
  t->dev = dev;
  t->dtype = dtype;
  t->shape = shape;
  t->strides = st;
  t->mem = std::move(m);
  return tensor(std::move(t));
}

}  // namespace kiln
