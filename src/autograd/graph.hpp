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
  // Post-accumulate hooks (leaves), run after accumulation in registration order.
  struct hook {
    std::uint64_t id;
    autograd::post_accumulate_hook fn;
    bool gradient_only;  // reads the gradient and writes nothing the graph reads
  };
  std::vector<hook> post_accumulate;
};

// Whether x takes part in the graph (a marked leaf or a recorded result).
inline bool needs_grad(const tensor_impl* x) {
  return x && x->ag && (x->ag->requires_grad || x->ag->fn);
}
// Whether recording is on and any of xs needs a gradient: the cheap test every op makes.
bool grad_wanted(std::initializer_list<const tensor*> xs);
// In-place writes are not recorded: kiln::invalid_argument naming fn when grad_wanted(xs).
void refuse_in_place(const char* fn, std::initializer_list<const tensor*> xs);

// Registers a post-accumulate hook on a leaf marked requires_grad_ (kiln::invalid_argument else).
std::uint64_t add_hook(const tensor& leaf, autograd::post_accumulate_hook fn, bool gradient_only);
// A post-accumulate hook that promises to read only the leaf's gradient (data_parallel's bucket
// all-reduce): it never writes the leaf, so the leaf's gradient may be handed over early.
std::uint64_t register_gradient_only_hook(const tensor& leaf, autograd::post_accumulate_hook fn);
// Whether a leaf's gradient may be accumulated (and its hooks run) before the node that made it
// has queued the rest of its backward: when every hook is gradient-only. A public hook may write
// the parameter (an optimizer step in the hook), which the rest of that backward still reads, so
// then the gradient waits for the node's end, as in PyTorch.
bool early_delivery_safe(const tensor_impl& leaf);

// The backward() sweep running on this thread (a new id for each sweep), 0 outside one.
std::uint64_t backward_pass();

// Inside a node's backward: hands input k's gradient to the engine now instead of in the
// returned vector (whose entry k is then ignored), so what it completes (a parameter's
// accumulation and its post-accumulate hooks, data_parallel's bucket all-reduce) is queued
// before the rest of this backward. False outside backward() or when k was handed already: the
// caller returns the gradient as usual.
bool deliver_early(std::size_t input, const tensor& gradient);

}  // namespace kiln::detail
