// Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_) over the optimizer's
// flat gradient buffers, without reading anything back: the norm, the factor and the scaling
// all happen on the device, so a training step still never waits for it.
//
//   loss.backward();
//   kiln::tensor norm = kiln::optim::clip_grad_norm_(opt, 1.0);   // rank 0, f32, lazy-free
//   opt.step();
//   // norm.item<float>() when the value is wanted (a sync), e.g. for logging every N steps
#pragma once

#include "kiln/optim.hpp"

namespace kiln::optim {

// Scales every gradient of opt's parameters in place by min(1, max_norm / (norm + 1e-6)),
// norm the L2 norm of all of them together (accumulated in f32, or f64 for f64 groups), and
// returns that norm (before clipping) as a rank-0 f32 tensor on the device of the optimizer's
// first parameter. A gradient replaced by set_grad is taken into the optimizer's buffer first,
// as step() does. Cost per (device, dtype) group: one reduction and one scaling pass over its
// gradients. max_norm must be positive and finite (kiln::invalid_argument).
tensor clip_grad_norm_(optimizer& opt, double max_norm);

}  // namespace kiln::optim
