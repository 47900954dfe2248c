// The lazy expressions behind linspace, rand and randn (tensor/generate.cpp). The public
// functions evaluate them at once; tests render them (for NVRTC) without evaluating.
#pragma once

#include "tensor/build.hpp"

namespace kiln::detail {

// Uniform [0, 1) (normal = false) or standard normal values of dtype (f32 or f64, else
// kiln::dtype_error) over shape from Philox4x32-10 of each flat index keyed by seed.
impl_ptr random_expr(const device& dev, const shape_t& shape, std::uint64_t seed, scalar_type dtype,
                     bool normal);
// linspace for steps >= 2.
impl_ptr linspace_expr(const device& dev, double start, double end, std::int64_t steps,
                       scalar_type dtype);

}  // namespace kiln::detail
