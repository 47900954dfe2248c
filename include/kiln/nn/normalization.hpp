// Layer and RMS normalisation layers of kiln::nn (torch.nn.LayerNorm / RMSNorm): parameters
// "weight" (ones) and "bias" (zeros, layer_norm only) of normalized_shape, as PyTorch's
// state_dict names them; none with elementwise_affine = false.
//
//   kiln::nn::layer_norm ln(dev, {768});                  // eps 1e-5, weight and bias
//   kiln::nn::rms_norm rn(dev, {768});                    // eps: see kiln::rms_norm
//   kiln::tensor y = ln(x);                               // x [..., 768]
#pragma once

#include <optional>

#include "kiln/nn/module.hpp"

namespace kiln::nn {

struct norm_options {
  bool elementwise_affine = true;
  bool bias = true;  // layer_norm: a bias too (when elementwise_affine)
  scalar_type dtype = scalar_type::f32;
};

class layer_norm : public module {
 public:
  layer_norm(const device& dev, shape_t normalized_shape, double eps = 1e-5,
             const norm_options& o = {});
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  tensor weight, bias;  // undefined without elementwise_affine (bias: without bias)
  shape_t normalized_shape;
  double eps;
};

class rms_norm : public module {
 public:
  rms_norm(const device& dev, shape_t normalized_shape, std::optional<double> eps = {},
           const norm_options& o = {});
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  tensor weight;  // undefined without elementwise_affine
  shape_t normalized_shape;
  std::optional<double> eps;
};

}  // namespace kiln::nn
