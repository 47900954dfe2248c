// Writing into an existing tensor's storage (what optimizers and running statistics need).
//
//   auto w = kiln::tensor::randn(dev, {256, 128}, 1);
//   kiln::copy_(w, w - 0.01f * grad);     // evaluated into new storage, then copied into w
//   kiln::copy_(w, 0.f);                  // a scalar broadcasts
#pragma once

#include "kiln/tensor.hpp"

namespace kiln {

// Copies src (broadcast to dst's shape, converted to dst's dtype) into dst, in place, and
// returns dst. dst must be stored and contiguous (a lazy dst is evaluated first); every handle
// sharing its storage, views included, sees the new values. src may read dst: it is evaluated
// in full before the copy. Errors: kiln::shape_error (src does not broadcast to dst),
// kiln::device_mismatch, kiln::invalid_argument (dst undefined or not contiguous).
tensor copy_(const tensor& dst, const tensor& src);
template <scalar T>
tensor copy_(const tensor& dst, T value) {
  return copy_(dst, detail::scalar_like(dst, scalar_type_of<T>, detail::bits_of(value)));
}

}  // namespace kiln
