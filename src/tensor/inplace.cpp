// copy_: src is evaluated into new contiguous storage of dst's shape and dtype (so it may read
// dst), then copied device-to-device into dst's storage on the default queue.
#include "kiln/tensor/inplace.hpp"

#include "autograd/graph.hpp"
#include "kiln/buffer.hpp"
#include "runtime/runtime.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {

tensor copy_(const tensor& dst, const tensor& src) {
  detail::reset_stats();
  detail::tensor_impl& d = detail::impl_of(dst, "copy_");
  detail::tensor_impl& s = detail::impl_of(src, "copy_");
  detail::refuse_in_place("copy_", {&dst, &src});
  if (!(d.dev == s.dev))
    throw device_mismatch("kiln::copy_: dst is on " + d.dev.id() + ", src on " + s.dev.id());
  detail::materialise(d);
  if (!dst.is_contiguous())
    throw invalid_argument("kiln::copy_: dst of shape " + to_string(d.shape) + " and strides " +
                           to_string(d.strides) + " is not contiguous");
  tensor v = src.to(d.dtype);
  if (v.shape() != d.shape) v = v.expand(d.shape);  // shape_error when it does not broadcast
  // Stored data sharing dst's storage (a view of it) is copied first: the copy may not overlap.
  if (v.impl()->kind == detail::tensor_kind::stored && v.impl()->mem == d.mem)
    v = detail::copy_node(v);
  v = detail::contiguous_of(v);
  const detail::tensor_impl& c = *v.impl();
  const std::uint64_t bytes =
      static_cast<std::uint64_t>(detail::numel_of(d.shape)) * size_of(d.dtype);
  if (bytes)
    detail::copy_d2d(*d.dev.default_queue().impl(), *d.mem,
                     static_cast<std::uint64_t>(d.offset) * size_of(d.dtype), *c.mem,
                     static_cast<std::uint64_t>(c.offset) * size_of(c.dtype), bytes);
  return dst;
}

}  // namespace kiln
