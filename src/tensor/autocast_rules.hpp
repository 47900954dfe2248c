// The two casts kiln::autocast's rules are made of, in one place (the ops call them; see
// kiln/tensor/autocast.hpp for which op takes which).
#pragma once

#include "kiln/tensor.hpp"

namespace kiln::detail {

// Inside an autocast scope, an f32 tensor in the scope's 16-bit type; else x itself.
tensor autocast_narrow(const tensor& x);
// A 16-bit tensor in f32 (a recorded cast: the gradient flows back); else x itself.
tensor widen_reduced(const tensor& x);

}  // namespace kiln::detail
