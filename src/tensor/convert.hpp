// Host-side conversion of a scalar's bits between dtypes, as C++'s static_cast does (fill
// values, clamp bounds, and scalar operands cast before they are captured).
#pragma once

#include <cstdint>

#include "kiln/scalar_type.hpp"

namespace kiln::detail {

std::uint64_t convert_bits(scalar_type from, std::uint64_t bits, scalar_type to);

}  // namespace kiln::detail
