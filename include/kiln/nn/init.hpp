// Seeded initialisation (PyTorch's torch.nn.init), written in place into a tensor (under
// kiln::no_grad). Values come from kiln::tensor::rand / randn keyed by the seed, so the same
// seed gives the same weights on every device.
//
//   kiln::nn::manual_seed(42);                         // the sequence layers draw from
//   auto w = kiln::tensor::empty(dev, {256, 784});
//   kiln::nn::init::kaiming_uniform_(w, kiln::nn::next_seed());   // ReLU gain, fan_in
//   kiln::nn::init::xavier_normal_(w, 7);
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kiln/tensor.hpp"

namespace kiln::nn {

// The sequence of initialisation seeds. manual_seed restarts the calling thread's own sequence
// (and the process-wide one, which threads that never called it draw from); next_seed returns
// the next value of the calling thread's sequence. So ranks of kiln::collective::run_per_rank
// that each call manual_seed(s) and build a model get the same parameters as one thread would,
// whatever the threads' interleaving (issue 23: two ranks building LeNet at once drew from one
// shared counter and got other, sometimes repeated, layer keys).
void manual_seed(std::uint64_t seed);
std::uint64_t next_seed();

namespace init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (rank >= 2).
std::pair<double, double> fans(const tensor& t);
// PyTorch's calculate_gain: linear/conv/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2 / (1 + a^2)), selu 3/4.
double gain(const std::string& nonlinearity, double a = 0);

tensor uniform_(const tensor& t, double lo, double hi, std::uint64_t seed);
tensor normal_(const tensor& t, double mean, double std, std::uint64_t seed);
tensor constant_(const tensor& t, double value);
tensor zeros_(const tensor& t);
tensor ones_(const tensor& t);
// bound = gain * sqrt(6 / (fan_in + fan_out)); std = gain * sqrt(2 / (fan_in + fan_out)).
tensor xavier_uniform_(const tensor& t, std::uint64_t seed, double gain = 1);
tensor xavier_normal_(const tensor& t, std::uint64_t seed, double gain = 1);
// mode "fan_in" or "fan_out"; bound = gain(nonlinearity, a) * sqrt(3 / fan).
tensor kaiming_uniform_(const tensor& t, std::uint64_t seed, double a = 0,
                        const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
tensor kaiming_normal_(const tensor& t, std::uint64_t seed, double a = 0,
                       const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu");

}  // namespace init
}  // namespace kiln::nn
