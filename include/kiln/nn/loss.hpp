// Losses of kiln::nn (PyTorch's definitions). Each returns a rank-0 tensor for reduction
// "mean" (default) or "sum", or the per-element losses for "none".
//
//   kiln::tensor logits = model(x);                     // [N, C]
//   kiln::tensor loss = kiln::nn::cross_entropy(logits, labels);   // labels: int [N]
//   loss.backward();
//
// cross_entropy is log_softmax and the negative log-likelihood in one: computed with the row
// maximum subtracted (stable for logits of any size), and its gradient is the fused closed
// form softmax(logits) - one_hot(labels), scaled, in one kernel.
#pragma once

#include <string>

#include "kiln/tensor.hpp"

namespace kiln::nn {

// mean/sum/none of (input - target)^2; shapes broadcast.
tensor mse_loss(const tensor& input, const tensor& target, const std::string& reduction = "mean");

// logits [N, C] (f32/f64), labels [N] of any integer dtype in [0, C): mean over N of
// logsumexp(logits_i) - logits_i[label_i]. A label outside [0, C) is kiln::invalid_argument:
// at once on the CPU; on accelerators the check runs on the device without a host wait and a
// later cross_entropy call on that device throws it (within two calls), as a device-side assert.
tensor cross_entropy(const tensor& logits, const tensor& labels,
                     const std::string& reduction = "mean");

// max(x, 0) - x t + log(1 + exp(-|x|)): binary cross-entropy on logits, stable for any x.
tensor binary_cross_entropy_with_logits(const tensor& logits, const tensor& targets,
                                        const std::string& reduction = "mean");

}  // namespace kiln::nn
