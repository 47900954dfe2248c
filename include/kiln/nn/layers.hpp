// Layers of kiln::nn (PyTorch's torch.nn names, shapes and default initialisation).
//
//   const kiln::device dev = kiln::device::best();
//   kiln::nn::manual_seed(0);                          // every layer's initialisation follows
//   kiln::nn::sequential lenet(
//       kiln::nn::conv2d(dev, 1, 6, 5), kiln::nn::relu(), kiln::nn::max_pool2d(2),
//       kiln::nn::conv2d(dev, 6, 16, 5), kiln::nn::relu(), kiln::nn::max_pool2d(2),
//       kiln::nn::flatten(), kiln::nn::linear(dev, 256, 120), kiln::nn::relu(),
//       kiln::nn::linear(dev, 120, 84), kiln::nn::relu(), kiln::nn::linear(dev, 84, 10));
//   kiln::tensor logits = lenet(images);               // [N, 1, 28, 28] -> [N, 10]
//
// Weights are created on the given device in f32 (or the dtype asked for) and initialised as
// PyTorch does: weights kaiming_uniform with a = sqrt(5) (uniform in +-1/sqrt(fan_in)), biases
// uniform in +-1/sqrt(fan_in); batch norm weight 1, bias 0.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "kiln/nn/module.hpp"
#include "kiln/tensor/conv.hpp"

namespace kiln::nn {

struct layer_options {
  bool bias = true;
  scalar_type dtype = scalar_type::f32;
  std::uint64_t seed = 0;  // 0: the next seed of nn::manual_seed's sequence
};

// y = x w^T + b; x [..., in], w [out, in], b [out].
class linear : public module {
 public:
  linear(const device& dev, std::int64_t in, std::int64_t out, const layer_options& o = {});
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  tensor weight, bias;  // bias undefined without one
};

// x [N, C, H, W] (or [C, H, W]), w [K, C / groups, R, S].
class conv2d : public module {
 public:
  conv2d(const device& dev, std::int64_t in_channels, std::int64_t out_channels,
         std::int64_t kernel, const conv2d_options& conv = {}, const layer_options& o = {});
  conv2d(const device& dev, std::int64_t in_channels, std::int64_t out_channels,
         std::array<std::int64_t, 2> kernel, const conv2d_options& conv = {},
         const layer_options& o = {});
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  tensor weight, bias;
  conv2d_options options;
};

class max_pool2d : public module {
 public:
  explicit max_pool2d(std::int64_t kernel)
      : max_pool2d(pool2d_options{.kernel = {kernel, kernel}}) {}
  explicit max_pool2d(const pool2d_options& o) : options(o) {}
  tensor forward(const tensor& x) const override;
  std::string describe() const override { return "max_pool2d"; }
  pool2d_options options;
};

class avg_pool2d : public module {
 public:
  explicit avg_pool2d(std::int64_t kernel)
      : avg_pool2d(pool2d_options{.kernel = {kernel, kernel}}) {}
  explicit avg_pool2d(const pool2d_options& o) : options(o) {}
  tensor forward(const tensor& x) const override;
  std::string describe() const override { return "avg_pool2d"; }
  pool2d_options options;
};

// Batch normalisation over channel dimension 1 of [N, C, H, W]. Training: batch statistics,
// running statistics updated (momentum); eval: running statistics. Buffers running_mean,
// running_var and num_batches_tracked (int64), as PyTorch's state_dict has them.
class batch_norm2d : public module {
 public:
  batch_norm2d(const device& dev, std::int64_t channels, double eps = 1e-5, double momentum = 0.1,
               scalar_type dtype = scalar_type::f32);
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double eps, momentum;
};

// Training: zeroes each element with probability p and scales the rest by 1 / (1 - p); the
// mask is kiln::tensor::rand keyed by the seed and a per-call counter, so a run repeats bit for
// bit. Eval: the identity.
class dropout : public module {
 public:
  explicit dropout(double p = 0.5, std::uint64_t seed = 0);
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  double p;

 private:
  std::uint64_t seed_;
  std::shared_ptr<std::atomic<std::uint64_t>> calls_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...] (dimensions start_dim..end_dim merged).
class flatten : public module {
 public:
  explicit flatten(int start_dim = 1, int end_dim = -1) : start_(start_dim), end_(end_dim) {}
  tensor forward(const tensor& x) const override;
  std::string describe() const override { return "flatten"; }

 private:
  int start_, end_;
};

#define KILN_NN_ACTIVATION(name, expr)                              \
  class name : public module {                                      \
   public:                                                          \
    tensor forward(const tensor& x) const override { return expr; } \
    std::string describe() const override { return #name; }         \
  };
KILN_NN_ACTIVATION(relu, kiln::relu(x))
KILN_NN_ACTIVATION(sigmoid, kiln::sigmoid(x))
KILN_NN_ACTIVATION(tanh, kiln::tanh(x))
KILN_NN_ACTIVATION(gelu, kiln::gelu(x))
#undef KILN_NN_ACTIVATION

class softmax : public module {
 public:
  explicit softmax(int dim = -1) : dim_(dim) {}
  tensor forward(const tensor& x) const override { return x.softmax(dim_); }
  std::string describe() const override { return "softmax"; }

 private:
  int dim_;
};

class log_softmax : public module {
 public:
  explicit log_softmax(int dim = -1) : dim_(dim) {}
  tensor forward(const tensor& x) const override { return x.log_softmax(dim_); }
  std::string describe() const override { return "log_softmax"; }

 private:
  int dim_;
};

}  // namespace kiln::nn
