// The reference models: PyTorch's layer order, so their state_dict keys match.
#include "kiln/nn/models.hpp"

namespace kiln::nn::models {

sequential mlp(const device& dev, scalar_type dtype) {
  const layer_options o{.dtype = dtype};
  return sequential(linear(dev, 784, 256, o), relu(), linear(dev, 256, 128, o), relu(),
                    linear(dev, 128, 10, o));
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
