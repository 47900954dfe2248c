// Gradient recording of layer_norm and rms_norm (kept apart from derivatives.hpp so that adding
// them recompiles only their own files).
#pragma once

#include "kiln/tensor/layer_norm.hpp"

namespace kiln::detail::grad {

// Records the normalisation whose forward gave r (inputs x, w, b; w and b may be undefined)
// and returns r.output as part of the graph.
tensor layer_norm(bool rms, const tensor& x, const shape_t& normalized_shape, const tensor& w,
                  const tensor& b, const layer_norm_result& r);

}  // namespace kiln::detail::grad
