// Tensor operations under kiln::fallback_scope (docs/resilience.md): an evaluation or an
// eager operation (matmul, conv2d) that fails on its device for a reason another device may not
// share runs again on the next device of the thread's chain, on copies of its inputs; the
// caller's tensors stay where they are, the result lives where it was made.
#pragma once

#include <functional>
#include <vector>

#include "kiln/fallback.hpp"
#include "kiln/tensor.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

// Evaluates the lazy t with evaluate(t); when that fails with an error that moves, evaluates a
// copy of t's expression on the next device of `chain` (its stored inputs, and any result the
// failed try already made, copied there), and so on; t then holds the result where it was made.
void materialise_falling_back(tensor_impl& t, const fallback& chain,
                              void (*evaluate)(tensor_impl&));

// op(xs), or under the thread's fallback scope: when op fails with an error that moves, op on
// copies of xs (undefined ones stay undefined) on the next device of the chain, and so on.
// `what` names the operation in the log.
tensor run_op_falling_back(const char* what, std::vector<tensor> xs,
                           const std::function<tensor(const std::vector<tensor>&)>& op);

}  // namespace kiln::detail
