// kiln::nn::data_parallel: PyTorch's DistributedDataParallel over kiln::collective. Every rank
// holds a replica of the model and its optimizer, trains on its own shard of each batch, and
// the gradients are averaged across ranks before each step, so the parameters stay identical
// on every rank.
//
//   auto world = kiln::collective::mpi::world(dev);          // or one rank of an in-process group
//   kiln::nn::sequential model(...);                          // same architecture on every rank
//   auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.05, .momentum = 0.9});
//   kiln::nn::data_parallel ddp(model, opt, world);           // rank 0's parameters everywhere
//   for (auto& [x, y] : my_shard) {
//     opt.zero_grad();
//     kiln::nn::cross_entropy(ddp(x), y).backward();          // all-reduces start during backward
//     ddp.step();                                             // waits for them, then opt.step()
//   }
//
// The optimizer's flat gradient buffers (kiln/optim.hpp) are cut into buckets of about
// bucket_bytes (the first one first_bucket_bytes), in reverse parameter order (the order backward
// produces them). A bucket's all-reduce (avg) is launched as soon as backward has accumulated all
// its gradients (an autograd post-accumulate hook), in bucket order on every rank; on GPUs it runs
// on a queue of its own, overlapping the rest of backward. step() launches the buckets not started
// (a parameter without a gradient), makes the device's default queue wait for them, and steps.
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/collective.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/optim.hpp"

namespace kiln::nn {

struct data_parallel_options {
  // 0: automatic, a quarter of the gradients' bytes within [1 MiB, 25 MiB] (PyTorch's
  // bucket_cap_mb is 25 MB): a model of a few tens of MB still gets buckets that start while
  // backward runs, instead of one bucket that waits for the last gradient.
  std::uint64_t bucket_bytes = 0;
  // The first bucket (the last layers' gradients, the first backward produces) is cut smaller,
  // so communication starts early in backward (PyTorch's first bucket: 1 MB).
  std::uint64_t first_bucket_bytes = 1ull << 20;
  bool broadcast_parameters = true;  // rank 0's parameters and buffers at construction
  bool overlap = true;               // launch buckets from backward; else all in step()
};

class data_parallel {
 public:
  // model's parameters must be the optimizer's (in any order) and live on comm's device.
  data_parallel(module& model, optim::optimizer& opt, collective::communicator comm,
                const data_parallel_options& o = {});
  ~data_parallel();
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  tensor forward(const tensor& x) const;
  tensor operator()(const tensor& x) const { return forward(x); }
  // Averages the gradients across ranks (what backward did not start yet, then waits).
  void synchronize_gradients();
  // synchronize_gradients() (unless called since the last step), then the optimizer's step.
  void step();
  const collective::communicator& communicator() const;
  std::size_t bucket_count() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace kiln::nn
