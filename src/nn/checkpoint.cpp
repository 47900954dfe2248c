// Checkpoints: one safetensors file, the module's state_dict keys as they are and the
// optimizer's prefixed with "optimizer.".
#include "kiln/nn/checkpoint.hpp"

#include "kiln/optim.hpp"
#include "kiln/tensor/safetensors.hpp"

namespace kiln::nn {
namespace {
constexpr std::string_view prefix = "optimizer.";
}

void save_checkpoint(const std::string& path, const module& model, const optim::optimizer* opt) {
  named_tensors all = model.state_dict();
  std::map<std::string, std::string> meta{{"format", "kiln"}};
  if (opt) {
    meta["optimizer"] = opt->name();
    for (auto& [n, t] : opt->state_dict()) all.emplace_back(std::string(prefix) + n, t);
  }
  save_safetensors(path, all, meta);
}

void load_checkpoint(const std::string& path, module& model, optim::optimizer* opt) {
  const named_tensors mine = model.state_dict();
  if (mine.empty()) throw invalid_argument("kiln::nn::load_checkpoint: the module has no tensors");
  const safetensors_file f = load_safetensors(path, mine.front().second.get_device());
  named_tensors weights;
  optim::state_dict_t state;
  for (const auto& [n, t] : f.tensors) {
    if (n.rfind(prefix, 0) == 0)
      state.emplace_back(n.substr(prefix.size()), t);
    else
      weights.emplace_back(n, t);
  }
  model.load_state_dict(weights);
  if (opt) {
    if (state.empty())
      throw invalid_argument("kiln::nn::load_checkpoint: " + path + " holds no optimizer state");
    opt->load_state_dict(state);
  }
}

}  // namespace kiln::nn
