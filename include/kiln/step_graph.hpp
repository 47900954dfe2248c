// kiln::step_graph: a step of tensor work (a training step: forward, backward, the gradients'
// all-reduce, the optimizer) captured once and replayed as one CUDA graph, so a step costs its
// kernels and one launch instead of a host thread issuing each of them. PyTorch's
// torch.cuda.graphs with static inputs, for Kiln's tensors.
//
//   kiln::tensor x = kiln::tensor::zeros(dev, {256, 1, 28, 28});           // static inputs
//   kiln::tensor y = kiln::tensor::zeros(dev, {256}, kiln::scalar_type::i64);
//   kiln::step_graph step(dev, [&] {
//     opt.zero_grad();
//     kiln::tensor loss = kiln::nn::cross_entropy(model(x), y);
//     loss.backward();
//     opt.step();
//     return std::vector<kiln::tensor>{loss};
//   });
//   for (auto& [bx, by] : batches) {
//     kiln::copy_(x, bx);                      // write the inputs in place
//     kiln::copy_(y, by);
//     kiln::tensor loss = step.run()[0];       // eager for the warm-up runs, then one replay
//   }
//
// The first options.warmup runs call the function (kernels compile, optimizer state and cuDNN
// plans are made). The next run captures it on the device's default queue and replays the
// capture; later runs only replay, without waiting for the device. Each run returns the same
// output tensors, rewritten by every replay.
//
// What a replay repeats is what the capture recorded: the function must only queue device work
// on the device (no value read back to the host, no work on another device), and its shapes
// and scalars (a learning rate, a dropout seed) are those of the capture: call recapture() after
// changing them. Memory the capture used stays allocated while the step_graph lives. Labels or
// indices found out of range in a replay (nn::cross_entropy, embedding) are reported by the
// run after the next. Backends without graphs (CPU, OpenCL), a checked-mode device, or a
// function that cannot be captured run the function every time: kind() says which, reason()
// why.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

struct step_graph_options {
  int warmup = 1;  // eager runs before the capture (at least 1 is advisable)
  graph_mode mode = graph_mode::automatic;  // queues: never capture (the eager reference)
};

class step_graph {
 public:
  using step_function = std::function<std::vector<tensor>()>;
  step_graph(const device& dev, step_function step, step_graph_options options = {});
  ~step_graph();  // waits for the last replay
  step_graph(step_graph&&) noexcept;
  step_graph& operator=(step_graph&&) noexcept;

  // One step. Throws what the function throws; kiln::invalid_argument for a device-side check
  // (labels out of range) failed in an earlier replay.
  const std::vector<tensor>& run();
  // The next run captures again (after a change of shapes or hyperparameters).
  void recapture();

  replay_kind kind() const;           // none before the first capture attempt; queues: eager
  const std::string& reason() const;  // why the step is not replayed as a CUDA graph
  std::uint64_t replays() const;
  const device& get_device() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace kiln
