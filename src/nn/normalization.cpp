// nn::layer_norm and nn::rms_norm: parameters, then kiln::layer_norm / kiln::rms_norm.
#include "kiln/nn/normalization.hpp"

#include "kiln/tensor/layer_norm.hpp"

namespace kiln::nn {
namespace {

shape_t checked(const char* layer, shape_t s) {
  if (s.empty())
    throw shape_error(std::string("kiln::nn::") + layer + ": normalized_shape is empty");
  for (std::int64_t d : s)
    if (d < 1)
      throw shape_error(std::string("kiln::nn::") + layer + ": normalized_shape " + to_string(s) +
                        " must have positive dims");
  return s;
}

std::string shape_text(const shape_t& s) {
  std::string t;
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return "(" + t + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

layer_norm::layer_norm(const device& dev, shape_t ns, double eps_, const norm_options& o)
    : normalized_shape(checked("layer_norm", std::move(ns))), eps(eps_) {
  if (!(eps > 0))
    throw invalid_argument("kiln::nn::layer_norm: eps is " + std::to_string(eps) +
                           "; it must be positive");
  if (o.elementwise_affine) {
    weight = register_parameter("weight", tensor::ones(dev, normalized_shape, o.dtype));
    if (o.bias) bias = register_parameter("bias", tensor::zeros(dev, normalized_shape, o.dtype));
  }
}

tensor layer_norm::forward(const tensor& x) const {
  return kiln::layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string layer_norm::describe() const {
  return "layer_norm(" + shape_text(normalized_shape) + ", eps=" + std::to_string(eps) +
         (weight.defined() ? "" : ", elementwise_affine=false") + ")";
}

rms_norm::rms_norm(const device& dev, shape_t ns, std::optional<double> eps_, const norm_options& o)
    : normalized_shape(checked("rms_norm", std::move(ns))), eps(eps_) {
  if (eps && !(*eps > 0))
    throw invalid_argument("kiln::nn::rms_norm: eps is " + std::to_string(*eps) +
                           "; it must be positive");
  if (o.elementwise_affine)
    weight = register_parameter("weight", tensor::ones(dev, normalized_shape, o.dtype));
}

tensor rms_norm::forward(const tensor& x) const {
  return kiln::rms_norm(x, normalized_shape, weight, eps);
}

std::string rms_norm::describe() const {
  return "rms_norm(" + shape_text(normalized_shape) +
         (eps ? ", eps=" + std::to_string(*eps) : std::string()) +
         (weight.defined() ? "" : ", elementwise_affine=false") + ")";
}

}  // namespace kiln::nn
