// Mixed precision (PyTorch's torch.autocast): inside an autocast scope, on this thread, matrix
// products (matmul, kiln::linear, nn::linear) and conv2d cast f32 operands to a 16-bit type and
// run on tensor cores, returning that type; pooling keeps it; batch norm normalises in f32 and
// returns the input's type; losses always compute in f32. Parameters stay
// f32 (the optimizer's master weights): the recorded casts carry gradients back in f32.
//
//   {
//     kiln::autocast mixed(kiln::scalar_type::bf16);
//     kiln::tensor loss = kiln::nn::cross_entropy(model.forward(x), y);   // f32 loss
//     loss.backward();                                                    // f32 gradients
//   }
//   opt.step();
#pragma once

#include <optional>

#include "kiln/scalar_type.hpp"

namespace kiln {

class autocast {
 public:
  // dtype: f16 or bf16 (else kiln::invalid_argument). enabled = false makes a scope that turns
  // autocast off inside an enclosing one.
  explicit autocast(scalar_type dtype = scalar_type::bf16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  // The 16-bit type of this thread's innermost enabled scope, if any.
  static std::optional<scalar_type> active() noexcept;

 private:
  std::optional<scalar_type> previous_;
};

}  // namespace kiln
