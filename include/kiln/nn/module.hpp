// kiln::nn::module: the base of every layer and model. A module owns named parameters (leaf
// tensors that require gradients), named buffers (state that is saved but not trained, such as
// batch norm's running statistics) and named child modules; names join with '.', as PyTorch's
// state_dict keys do ("0.weight", "features.3.bias"), so weights move between the two.
//
//   struct two_layer : kiln::nn::module {
//     std::shared_ptr<kiln::nn::linear> fc1, fc2;
//     two_layer(const kiln::device& dev) {
//       fc1 = register_module("fc1", kiln::nn::linear(dev, 784, 64));
//       fc2 = register_module("fc2", kiln::nn::linear(dev, 64, 10));
//     }
//     kiln::tensor forward(const kiln::tensor& x) const override {
//       return (*fc2)(kiln::relu((*fc1)(x)));
//     }
//   };
//
// forward is const: a trained model is shared by any number of threads running inference
// (under kiln::no_grad, in eval mode) with no locking.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::nn {

using named_tensors = std::vector<std::pair<std::string, tensor>>;

class module {
 public:
  module() = default;
  virtual ~module() = default;
  module(const module&) = default;  // shallow: the copy shares the parameters' tensors
  module& operator=(const module&) = default;

  virtual tensor forward(const tensor& x) const = 0;
  tensor operator()(const tensor& x) const { return forward(x); }
  // A short description for printing ("linear(784 -> 256)").
  virtual std::string describe() const { return "module"; }

  // Parameters and buffers of this module and its children, depth first, in registration order.
  named_tensors named_parameters() const;
  std::vector<tensor> parameters() const;
  named_tensors named_buffers() const;
  // Parameters and buffers: what a checkpoint holds (PyTorch's state_dict).
  named_tensors state_dict() const;
  // Copies values into the module's tensors (in place, so optimizers holding them see the new
  // values). strict: every key must match a tensor and every tensor must be given. Shapes must
  // match; values are converted to the tensor's dtype and moved to its device. Errors name the
  // key: kiln::invalid_argument (missing or unexpected), kiln::shape_error.
  void load_state_dict(const named_tensors& state, bool strict = true);
  std::int64_t parameter_count() const;

  // Training mode (dropout active, batch norm on batch statistics) or evaluation; recursive.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const noexcept { return training_; }

  const std::vector<std::pair<std::string, std::shared_ptr<module>>>& children() const noexcept {
    return children_;
  }
  // "sequential(\n  (0): linear(784 -> 256)\n ...)"
  std::string to_string() const;

 protected:
  // t becomes a leaf that requires a gradient; returns it.
  tensor register_parameter(std::string name, tensor t);
  tensor register_buffer(std::string name, tensor t);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, M m) {
    auto p = std::make_shared<M>(std::move(m));
    add_child(std::move(name), p);
    return p;
  }
  void add_child(std::string name, std::shared_ptr<module> m);

 private:
  void collect(const std::string& prefix, bool params, named_tensors& out) const;
  bool training_ = true;
  named_tensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<module>>> children_;
};

// Modules in order, each feeding the next; children are named "0", "1", ...
//   kiln::nn::sequential mlp(kiln::nn::linear(dev, 784, 256), kiln::nn::relu(),
//                            kiln::nn::linear(dev, 256, 10));
class sequential : public module {
 public:
  sequential() = default;
  template <class... M>
  explicit sequential(M... m) {
    (push_back(std::make_shared<M>(std::move(m))), ...);
  }
  void push_back(std::shared_ptr<module> m);
  std::size_t size() const noexcept { return children().size(); }
  module& operator[](std::size_t i) const { return *children().at(i).second; }
  tensor forward(const tensor& x) const override;
  std::string describe() const override { return "sequential"; }
};

}  // namespace kiln::nn
