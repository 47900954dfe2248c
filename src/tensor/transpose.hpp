// The transpose kernels' sources (tensor/transpose.cpp), exposed for the tests, which compile
// them for CUDA through NVRTC on machines without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/scalar_type.hpp"

namespace kiln::detail {

// tiled: out of place through a local-memory tile (needs barriers); copy: out of place, one
// item per element; swap: in place across the diagonal. Each defines "kt_transpose".
enum class transpose_variant : std::uint8_t { tiled, copy, swap };
std::string transpose_source(scalar_type t, transpose_variant v);

}  // namespace kiln::detail
