// kiln::nn: modules, layers, losses and initialisation over kiln::tensor with autograd
// (docs/nn.md). Optimizers are in kiln/optim.hpp.
//
//   #include <kiln/nn.hpp>
//   const kiln::device dev = kiln::device::best();
//   kiln::nn::manual_seed(0);
//   kiln::nn::sequential mlp(kiln::nn::linear(dev, 784, 256), kiln::nn::relu(),
//                            kiln::nn::linear(dev, 256, 10));
//   kiln::tensor loss = kiln::nn::cross_entropy(mlp(x), labels);
//   loss.backward();                                   // every parameter's grad()
//   for (auto& [name, p] : mlp.named_parameters()) { /* "0.weight", "0.bias", ... */ }
#pragma once

#include "kiln/nn/init.hpp"
#include "kiln/nn/layers.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/tensor.hpp"
