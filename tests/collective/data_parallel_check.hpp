// Shared by the in-process and the mpirun tests: kiln::nn::data_parallel on one rank of a
// group, checked against one process training on the whole batch.
#pragma once

#include <gtest/gtest.h>

#include "kiln/collective.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/optim.hpp"
#include "kiln/step_graph.hpp"
#include "kiln/tensor/inplace.hpp"

namespace collective_test {

using kiln::collective::reduce_op;

// Data-parallel training: identical parameters on every rank after each step, and the same
// parameters as one process training on the concatenated batch. captured: each rank's step is
// a kiln::step_graph (replayed as a CUDA graph where the backend has graphs).
inline void data_parallel_matches_one_process(const kiln::collective::communicator& c, bool overlap,
                                              bool captured = false) {
  const kiln::device dev = c.get_device();
  const int per_rank = 4, total = per_rank * c.size();
  auto make = [&] {
    return kiln::nn::sequential(kiln::nn::linear(dev, 6, 5, {.seed = 7}), kiln::nn::relu(),
                                kiln::nn::linear(dev, 5, 3, {.seed = 8}));
  };
  kiln::nn::sequential model = make();
  // Rank-dependent start: the wrapper's broadcast from rank 0 must fix it.
  if (c.rank() != 0) {
    kiln::no_grad off;
    for (kiln::tensor& p : model.parameters()) kiln::copy_(p, p * 3.f + 1.f);
  }
  auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  kiln::nn::data_parallel ddp(model, opt, c, {.bucket_bytes = 64, .overlap = overlap});
  EXPECT_GT(ddp.bucket_count(), 1u);  // 64 bytes: several buckets
  kiln::nn::sequential ref = make();
  auto ref_opt = kiln::optim::sgd(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  kiln::tensor sx = kiln::tensor::zeros(dev, {per_rank, 6});
  kiln::tensor sy = kiln::tensor::zeros(dev, {per_rank, 3});
  kiln::step_graph graph(dev, [&] {
    opt.zero_grad();
    kiln::tensor loss = kiln::nn::mse_loss(ddp(sx), sy);
    loss.backward();
    ddp.step();
    return std::vector<kiln::tensor>{loss};
  });
  for (int step = 0; step < 4; ++step) {
    const kiln::tensor x_all = kiln::tensor::randn(dev, {total, 6}, 100 + step);
    const kiln::tensor y_all = kiln::tensor::randn(dev, {total, 3}, 200 + step);
    const kiln::tensor x =
        x_all.slice(0, c.rank() * per_rank, (c.rank() + 1) * per_rank).contiguous();
    const kiln::tensor y =
        y_all.slice(0, c.rank() * per_rank, (c.rank() + 1) * per_rank).contiguous();
    if (captured) {
      kiln::copy_(sx, x);
      kiln::copy_(sy, y);
      graph.run();
    } else {
      opt.zero_grad();
      kiln::nn::mse_loss(ddp(x), y).backward();
      // Odd steps synchronize first (as a caller clipping the gradients would): step() then
      // steps without all-reducing again.
      if (step % 2) ddp.synchronize_gradients();
      ddp.step();
    }
    ref_opt.zero_grad();
    kiln::nn::mse_loss(ref.forward(x_all), y_all).backward();
    ref_opt.step();
    const auto mine = model.parameters(), theirs = ref.parameters();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      // Identical across ranks: the max over ranks of |p - p_rank0| is exactly 0.
      kiln::tensor p = mine[i].detach().contiguous();
      kiln::tensor p0 = p.contiguous() + 0.f;
      p0.eval();
      c.broadcast(p0, 0);
      kiln::tensor diff = kiln::abs(p - p0).max().contiguous();
      c.all_reduce(diff, reduce_op::max);
      EXPECT_EQ(diff.item<float>(), 0.f) << "step " << step << " parameter " << i;
      const auto a = p.to_vector<float>(), b = theirs[i].detach().to_vector<float>();
      for (std::size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], b[k], 1e-5) << "step " << step << " parameter " << i << " element " << k;
    }
  }
  if (captured && dev.backend() == "cuda") {
    EXPECT_EQ(graph.kind(), kiln::replay_kind::cuda_graph) << graph.reason();
  }
}

}  // namespace collective_test
