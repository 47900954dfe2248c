// Shape arithmetic of tensors: axes, broadcasting, inferred sizes, and the messages of their
// errors (kiln::axis_error, kiln::shape_error).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln::detail {

// dim in [-rank, rank) -> [0, rank); kiln::axis_error naming what, the axis and the rank.
int normalise_axis(int dim, int rank, const char* what);
// kiln::shape_error when a shape has more than max_tensor_rank dims or a negative size.
void check_shape(const shape_t& s, const char* what);
// NumPy broadcasting: right-aligned, equal sizes or size 1; kiln::shape_error naming both.
shape_t broadcast_shapes(const shape_t& a, const shape_t& b);
// Replaces one -1 by the size that makes numel equal n; kiln::shape_error when impossible.
shape_t infer_shape(const shape_t& want, std::int64_t n, const shape_t& from, const char* what);

}  // namespace kiln::detail
