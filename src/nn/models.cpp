// The reference models: PyTorch's layer order, so their state_dict keys match.
#include "kiln/nn/models.hpp"

#include <string>

#include "kiln/error.hpp"

namespace kiln::nn::models {

sequential mlp(const device& dev, scalar_type dtype) {
  const layer_options o{.dtype = dtype};
  return sequential(linear(dev, 784, 256, o), relu(), linear(dev, 256, 128, o), relu(),
                    linear(dev, 128, 10, o));
}

sequential mlp_wide(const device& dev, scalar_type dtype) {
  const layer_options o{.dtype = dtype};
  return sequential(linear(dev, 784, 2048, o), relu(), linear(dev, 2048, 2048, o), relu(),
                    linear(dev, 2048, 2048, o), relu(), linear(dev, 2048, 10, o));
}

sequential by_name(const std::string& name, const device& dev, scalar_type dtype) {
  if (name == "mlp") return mlp(dev, dtype);
  if (name == "mlp_wide") return mlp_wide(dev, dtype);
  if (name == "lenet") return lenet(dev, false, dtype);
  throw invalid_argument("kiln::nn::models::by_name: no model \"" + name +
                         "\" (mlp, mlp_wide, lenet)");
}

shape_t sample_shape(const std::string& name) {
  if (name == "mlp" || name == "mlp_wide") return {784};
  if (name == "lenet") return {1, 28, 28};
  throw invalid_argument("kiln::nn::models::sample_shape: no model \"" + name +
                         "\" (mlp, mlp_wide, lenet)");
}

sequential lenet(const device& dev, bool batch_norm, scalar_type dtype) {
  const layer_options o{.dtype = dtype};
  sequential s;
  const auto add = [&](auto m) { s.push_back(std::make_shared<decltype(m)>(std::move(m))); };
  add(conv2d(dev, 1, 6, 5, {}, o));
  if (batch_norm) add(batch_norm2d(dev, 6, 1e-5, 0.1, dtype));
  add(relu());
  add(max_pool2d(2));
  add(conv2d(dev, 6, 16, 5, {}, o));
  if (batch_norm) add(batch_norm2d(dev, 16, 1e-5, 0.1, dtype));
  add(relu());
  add(max_pool2d(2));
  add(flatten());
  add(linear(dev, 256, 120, o));
  add(relu());
  add(linear(dev, 120, 84, o));
  add(relu());
  add(linear(dev, 84, 10, o));
  return s;
}

}  // namespace kiln::nn::models
