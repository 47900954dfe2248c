// Reference models of kiln::nn (the ones `kiln train` trains on MNIST and bench_train times),
// laid out as PyTorch's nn.Sequential of the same layers so state_dict keys match
// ("0.weight", ...): a checkpoint written by PyTorch loads into them.
//
//   kiln::nn::sequential mlp = kiln::nn::models::mlp(dev);        // 784-256-128-10, ReLU
//   kiln::nn::sequential cnn = kiln::nn::models::lenet(dev);      // [N, 1, 28, 28] -> [N, 10]
//   kiln::nn::sequential big = kiln::nn::models::mlp_wide(dev);   // 784-2048-2048-2048-10
#pragma once

#include <string>

#include "kiln/nn/layers.hpp"
#include "kiln/nn/module.hpp"

namespace kiln::nn::models {

// Linear(784, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 10); input [N, 784].
sequential mlp(const device& dev, scalar_type dtype = scalar_type::f32);

// Linear(784, 2048), ReLU, Linear(2048, 2048), ReLU, Linear(2048, 2048), ReLU,
// Linear(2048, 10); input [N, 784]. 10,020,874 parameters (40 MB of f32 gradients): the model
// where data-parallel communication matters, so its overlap with backward is measured.
sequential mlp_wide(const device& dev, scalar_type dtype = scalar_type::f32);

// Conv2d(1, 6, 5), ReLU, MaxPool2d(2), Conv2d(6, 16, 5), ReLU, MaxPool2d(2), Flatten,
// Linear(256, 120), ReLU, Linear(120, 84), ReLU, Linear(84, 10); input [N, 1, 28, 28].
// With batch_norm, a batch_norm2d follows each convolution (keys shift accordingly).
sequential lenet(const device& dev, bool batch_norm = false, scalar_type dtype = scalar_type::f32);

// The model of that name ("mlp", "mlp_wide", "lenet"; LeNet without batch norm), and the shape
// of one of its input samples ({784} or {1, 28, 28}); another name: kiln::invalid_argument.
sequential by_name(const std::string& name, const device& dev,
                   scalar_type dtype = scalar_type::f32);
shape_t sample_shape(const std::string& name);

}  // namespace kiln::nn::models
