// Checkpoints in the safetensors format (what PyTorch users exchange weights in): a module's
// state_dict under its own names ("0.weight", ...) and, optionally, an optimizer's state under
// "optimizer.<name>" in the same file, with metadata saying what wrote it.
//
//   kiln::nn::save_checkpoint("mlp.safetensors", model, &opt);   // weights + Adam state
//   kiln::nn::load_checkpoint("mlp.safetensors", model, &opt);   // resume training
//   kiln::nn::load_checkpoint("torch_mlp.safetensors", model);   // weights saved by PyTorch
#pragma once

#include <string>

#include "kiln/nn/module.hpp"

namespace kiln::optim {
class optimizer;
}

namespace kiln::nn {

// Writes atomically (a crash never leaves half a file). metadata: "format" = "kiln",
// "optimizer" = its name when given.
void save_checkpoint(const std::string& path, const module& model,
                     const optim::optimizer* opt = nullptr);
// Loads the module's tensors (strict: every key of the module must be there; keys starting
// with "optimizer." are the optimizer's) and, when opt is given, the optimizer's state (the
// file must hold one). Errors as module::load_state_dict and optimizer::load_state_dict, and
// kiln::invalid_argument when opt is given but the file has no optimizer state.
void load_checkpoint(const std::string& path, module& model, optim::optimizer* opt = nullptr);

}  // namespace kiln::nn
