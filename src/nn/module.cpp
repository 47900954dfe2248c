// module: registration, enumeration by name, state_dict loading, train/eval, and sequential.
#include "kiln/nn/module.hpp"

#include <map>

#include "kiln/tensor/inplace.hpp"

namespace kiln::nn {

tensor module::register_parameter(std::string name, tensor t) {
  if (!t.defined()) throw invalid_argument("kiln::nn::module: parameter " + name + " is undefined");
  if (!t.requires_grad()) t.requires_grad_();
  params_.emplace_back(std::move(name), t);
  return t;
}

tensor module::register_buffer(std::string name, tensor t) {
  buffers_.emplace_back(std::move(name), t);
  return t;
}

void module::add_child(std::string name, std::shared_ptr<module> m) {
  children_.emplace_back(std::move(name), std::move(m));
}

void module::collect(const std::string& prefix, bool params, named_tensors& out) const {
  for (const auto& [n, t] : params ? params_ : buffers_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

named_tensors module::named_parameters() const {
  named_tensors out;
  collect("", true, out);
  return out;
}

std::vector<tensor> module::parameters() const {
  std::vector<tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

named_tensors module::named_buffers() const {
  named_tensors out;
  collect("", false, out);
  return out;
}

named_tensors module::state_dict() const {
  named_tensors out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

std::int64_t module::parameter_count() const {
  std::int64_t n = 0;
  for (const tensor& t : parameters()) n += t.numel();
  return n;
}

void module::load_state_dict(const named_tensors& state, bool strict) {
  std::map<std::string, const tensor*> given;
  for (const auto& [n, t] : state)
    if (!given.emplace(n, &t).second)
      throw invalid_argument("kiln::nn::module::load_state_dict: key " + n + " given twice");
  const named_tensors mine = state_dict();
  std::map<std::string, bool> known;
  for (const auto& [n, t] : mine) {
    known[n] = true;
    const auto it = given.find(n);
    if (it == given.end()) {
      if (strict) throw invalid_argument("kiln::nn::module::load_state_dict: missing key " + n);
      continue;
    }
    const tensor& v = *it->second;
    if (v.shape() != t.shape())
      throw shape_error("kiln::nn::module::load_state_dict: " + n + " has shape " +
                        kiln::to_string(v.shape()) + " in the state, " +
                        kiln::to_string(t.shape()) + " in the module");
    no_grad off;
    tensor src =
        v.get_device() == t.get_device()
            ? v
            : tensor::from(t.get_device(), v.to(scalar_type::f64).contiguous().to_vector<double>(),
                           v.shape());
    copy_(t, src);
  }
  if (strict)
    for (const auto& [n, t] : state)
      if (!known.count(n))
        throw invalid_argument("kiln::nn::module::load_state_dict: unexpected key " + n);
}

void module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

std::string module::to_string() const {
  if (children_.empty()) return describe();
  std::string s = describe() + "(\n";
  for (const auto& [n, c] : children_) {
    std::string inner = c->to_string(), indented;
    for (char ch : inner) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    s += "  (" + n + "): " + indented + "\n";
  }
  return s + ")";
}

void sequential::push_back(std::shared_ptr<module> m) {
  if (!m) throw invalid_argument("kiln::nn::sequential: a null module");
  add_child(std::to_string(size()), std::move(m));
}

tensor sequential::forward(const tensor& x) const {
  tensor y = x;
  for (const auto& [n, c] : children()) y = c->forward(y);
  return y;
}

}  // namespace kiln::nn
