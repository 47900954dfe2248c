// The layers: parameters created and initialised as PyTorch does, forward in tensor operations
// (so autograd records them and elementwise work fuses across layers).
#include "kiln/nn/layers.hpp"

#include <atomic>
#include <cmath>

#include "kiln/nn/init.hpp"
#include "kiln/tensor/inplace.hpp"
#include "kiln/tensor/linear.hpp"
#include "kiln/tensor/normalization.hpp"

namespace kiln::nn {
namespace {

std::uint64_t seed_of(const layer_options& o) { return o.seed ? o.seed : next_seed(); }

void positive(const char* layer, const char* what, std::int64_t v) {
  if (v <= 0)
    throw invalid_argument(std::string("kiln::nn::") + layer + ": " + what +
                           " must be positive, got " + std::to_string(v));
}

// PyTorch's reset_parameters of linear and conv: kaiming_uniform(a = sqrt(5)) for the weight
// (uniform in +-1/sqrt(fan_in)), uniform in +-1/sqrt(fan_in) for the bias.
void reset(const tensor& w, const tensor& b, std::uint64_t seed) {
  init::kaiming_uniform_(w, seed, std::sqrt(5.0));
  if (b.defined()) {
    const double bound = 1 / std::sqrt(init::fans(w).first);
    init::uniform_(b, -bound, bound, seed ^ 0xB1A5B1A5ull);
  }
}

}  // namespace

linear::linear(const device& dev, std::int64_t in, std::int64_t out, const layer_options& o) {
  positive("linear", "in_features", in);
  positive("linear", "out_features", out);
  tensor w = tensor::empty(dev, {out, in}, o.dtype), b;
  if (o.bias) b = tensor::empty(dev, {out}, o.dtype);
  reset(w, b, seed_of(o));
  weight = register_parameter("weight", w);
  if (o.bias) bias = register_parameter("bias", b);
}

tensor linear::forward(const tensor& x) const {
  if (!x.defined()) throw invalid_argument("kiln::nn::linear: the input is undefined");
  if (x.dim() < 1 || x.size(-1) != weight.size(1))
    throw shape_error("kiln::nn::linear: expects an input [..., " + std::to_string(weight.size(1)) +
                      "], got " + kiln::to_string(x.shape()));
  // kiln::linear: on CUDA without autograd the bias joins the GEMM's epilogue. Under
  // kiln::autocast the product is 16-bit and the bias joins it in that type (as PyTorch's
  // addmm), so the layer's output stays 16-bit instead of promoting back to f32.
  return kiln::linear(x, weight, bias);
}

std::string linear::describe() const {
  return "linear(" + std::to_string(weight.size(1)) + " -> " + std::to_string(weight.size(0)) +
         (bias.defined() ? "" : ", no bias") + ")";
}

conv2d::conv2d(const device& dev, std::int64_t in_channels, std::int64_t out_channels,
               std::int64_t kernel, const conv2d_options& conv, const layer_options& o)
    : conv2d(dev, in_channels, out_channels, {kernel, kernel}, conv, o) {}

conv2d::conv2d(const device& dev, std::int64_t in_channels, std::int64_t out_channels,
               std::array<std::int64_t, 2> kernel, const conv2d_options& conv,
               const layer_options& o)
    : options(conv) {
  positive("conv2d", "in_channels", in_channels);
  positive("conv2d", "out_channels", out_channels);
  positive("conv2d", "kernel height", kernel[0]);
  positive("conv2d", "kernel width", kernel[1]);
  positive("conv2d", "groups", conv.groups);
  if (in_channels % conv.groups || out_channels % conv.groups)
    throw invalid_argument("kiln::nn::conv2d: channels " + std::to_string(in_channels) + " -> " +
                           std::to_string(out_channels) + " do not divide into " +
                           std::to_string(conv.groups) + " groups");
  tensor w = tensor::empty(dev, {out_channels, in_channels / conv.groups, kernel[0], kernel[1]},
                           o.dtype),
         b;
  if (o.bias) b = tensor::empty(dev, {out_channels}, o.dtype);
  reset(w, b, seed_of(o));
  weight = register_parameter("weight", w);
  if (o.bias) bias = register_parameter("bias", b);
}

tensor conv2d::forward(const tensor& x) const { return kiln::conv2d(x, weight, bias, options); }

std::string conv2d::describe() const {
  return "conv2d(" + std::to_string(weight.size(1) * options.groups) + " -> " +
         std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(2)) + "x" +
         std::to_string(weight.size(3)) + ")";
}

tensor max_pool2d::forward(const tensor& x) const { return kiln::max_pool2d(x, options); }
tensor avg_pool2d::forward(const tensor& x) const { return kiln::avg_pool2d(x, options); }

batch_norm2d::batch_norm2d(const device& dev, std::int64_t channels, double eps_, double momentum_,
                           scalar_type dtype)
    : eps(eps_), momentum(momentum_) {
  positive("batch_norm2d", "channels", channels);
  weight = register_parameter("weight", tensor::ones(dev, {channels}, dtype));
  bias = register_parameter("bias", tensor::zeros(dev, {channels}, dtype));
  running_mean = register_buffer("running_mean", tensor::zeros(dev, {channels}, dtype));
  running_var = register_buffer("running_var", tensor::ones(dev, {channels}, dtype));
  num_batches_tracked =
      register_buffer("num_batches_tracked", tensor::zeros(dev, {}, scalar_type::i64));
}

tensor batch_norm2d::forward(const tensor& x) const {
  if (!x.defined() || x.dim() != 4)
    throw shape_error("kiln::nn::batch_norm2d: expects an input [N, C, H, W], got " +
                      (x.defined() ? kiln::to_string(x.shape()) : std::string("undefined")));
  const bool training = is_training();
  tensor y = batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps).output;
  if (training) {
    no_grad off;
    copy_(num_batches_tracked, num_batches_tracked + std::int64_t(1));
  }
  return y;
}

std::string batch_norm2d::describe() const {
  return "batch_norm2d(" + std::to_string(weight.size(0)) + ")";
}

dropout::dropout(double p_, std::uint64_t seed)
    : p(p_),
      seed_(seed ? seed : next_seed()),
      calls_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
  if (!(p >= 0 && p < 1))
    throw invalid_argument("kiln::nn::dropout: p must be in [0, 1), got " + std::to_string(p));
}

tensor dropout::forward(const tensor& x) const {
  if (!is_training() || p == 0) return x;
  // Keyed by (seed, call): every call draws a fresh mask, and a rerun repeats them all.
  const std::uint64_t call = calls_->fetch_add(1);
  const tensor keep = tensor::rand(x.get_device(), x.shape(),
                                   seed_ + 0x9E3779B97F4A7C15ull * (call + 1), x.dtype()) >= p;
  const double scale = 1 / (1 - p);
  const tensor kept = x * keep.to(x.dtype());
  return x.dtype() == scalar_type::f32 ? kept * float(scale) : kept * scale;
}

std::string dropout::describe() const { return "dropout(p=" + std::to_string(p) + ")"; }

tensor flatten::forward(const tensor& x) const {
  const int rank = x.dim();
  const int s = start_ < 0 ? start_ + rank : start_, e = end_ < 0 ? end_ + rank : end_;
  if (s < 0 || e >= rank || s > e)
    throw axis_error("kiln::nn::flatten: dimensions " + std::to_string(start_) + ".." +
                     std::to_string(end_) + " do not fit a tensor of shape " +
                     kiln::to_string(x.shape()));
  shape_t shape;
  for (int d = 0; d < s; ++d) shape.push_back(x.size(d));
  std::int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= x.size(d);
  shape.push_back(merged);
  for (int d = e + 1; d < rank; ++d) shape.push_back(x.size(d));
  return x.reshape(shape);
}

}  // namespace kiln::nn
