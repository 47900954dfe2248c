// The recorded graph of reverse-mode autograd: a grad_meta on each tensor that takes part (a
// leaf that requires a gradient, or the result of a recorded operation) and a grad_node per
// recorded operation, pointing at its inputs. Outputs own their nodes, nodes own their inputs,
// so dropping the last handle of a result frees what only it needed. A node never holds its
// own output (that would be a cycle): backward receives it from the engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

struct grad_node {
  std::string name;
  // One per input of the operation; null where that input needs no gradient.
  std::vector<std::shared_ptr<tensor_impl>> inputs;
  autograd::backward_fn backward;
  bool released = false;  // backward ran without retain_graph: saved tensors are gone
};

struct grad_meta {
  bool requires_grad = false;     // a leaf marked by requires_grad_
  std::shared_ptr<grad_node> fn;  // the operation that produced it (non-leaves)
  tensor grad;                    // accumulated (leaves), or kept (retain_grad)
  bool retain = false;
  // autograd::register_post_accumulate_hook (leaves): id and hook, run after accumulation.
  std::vector<std::pair<std::uint64_t, autograd::post_accumulate_hook>> post_accumulate;
};

// Whether x takes part in the graph (a marked leaf or a recorded result).
inline bool needs_grad(const tensor_impl* x) {
  return x && x->ag && (x->ag->requires_grad || x->ag->fn);
}
// Whether recording is on and any of xs needs a gradient: the cheap test every op makes.
bool grad_wanted(std::initializer_list<const tensor*> xs);
// In-place writes are not recorded: kiln::invalid_argument naming fn when grad_wanted(xs).
void refuse_in_place(const char* fn, std::initializer_list<const tensor*> xs);

// Inside a node's backward: hands input k's gradient to the engine now instead of in the
// returned vector (whose entry k is then ignored), so what it completes (a parameter's
// accumulation and its post-accumulate hooks, data_parallel's bucket all-reduce) is queued
// before the rest of this backward. False outside backward() or when k was handed already: the
// caller returns the gradient as usual.
bool deliver_early(std::size_t input, const tensor& gradient);

}  // namespace kiln::detail
