// Reverse-mode automatic differentiation over kiln::tensor (docs/autograd.md).
//
//   auto w = kiln::tensor::randn(dev, {3, 2}, 1).requires_grad_();
//   auto x = kiln::tensor::rand(dev, {4, 3}, 2);
//   auto loss = kiln::relu(kiln::matmul(x, w)).square().mean();   // records the graph
//   loss.backward();                                   // w.grad(): d loss / d w, [3, 2]
//   {
//     kiln::no_grad off;                               // inference: nothing is recorded
//     auto y = kiln::matmul(x, w);
//   }
//
// Gradients are lazy tensor expressions like any other: the elementwise work of a backward
// chain fuses into one kernel, as forward chains do, up to the next product or reduction.
// Recording is per thread (no_grad is thread-local); the graph is freed by backward() unless
// retain_graph is asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

class tensor;

// Whether operations of this thread record the graph (true unless a no_grad is alive).
bool is_grad_enabled();

// Turns recording off for this thread while it lives (nests; restores the previous mode).
class no_grad {
 public:
  no_grad();
  ~no_grad();
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool previous_;
};

// Turns recording back on inside a no_grad scope while it lives.
class enable_grad {
 public:
  enable_grad();
  ~enable_grad();
  enable_grad(const enable_grad&) = delete;
  enable_grad& operator=(const enable_grad&) = delete;

 private:
  bool previous_;
};

namespace autograd {

// A custom differentiable operation (PyTorch's autograd.Function). Compute `output` from
// `inputs` (under no_grad, or from operations the graph need not see), then record it:
// backward receives the gradient of output (output's shape and dtype) and output itself, and
// returns one gradient per input, each of that input's shape (undefined: no gradient). Returns
// output, now part of the graph when recording is on and an input requires a gradient; else
// output unchanged. A backward throwing is reported by backward() with `name` in the message.
using backward_fn =
    std::function<std::vector<tensor>(const tensor& grad_output, const tensor& output)>;
tensor record(const std::string& name, const tensor& output, const std::vector<tensor>& inputs,
              backward_fn backward);

// Called after a backward() accumulated the gradient of `leaf` (a tensor marked
// requires_grad_) into its grad(), once per backward that reached it, on the thread running
// backward, in the engine's order: the order is the same on every run of the same graph
// (PyTorch's register_post_accumulate_grad_hook; kiln::nn::data_parallel starts its gradient
// all-reduces from it). A hook must not run backward. Returns an id for remove_hook.
using post_accumulate_hook = std::function<void(const tensor& leaf)>;
std::uint64_t register_post_accumulate_hook(const tensor& leaf, post_accumulate_hook fn);
void remove_hook(const tensor& leaf, std::uint64_t id);

// g summed over the dimensions broadcasting added or stretched, so it has `shape` (the
// gradient of an operand that was broadcast to g's shape).
tensor sum_to(const tensor& g, const std::vector<std::int64_t>& shape);

}  // namespace autograd
}  // namespace kiln
