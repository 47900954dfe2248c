// state_dict / load_state_dict: "step" and "lr" as rank-0 tensors, then each parameter's state
// buffers, copied out of (and back into) the flat state buffers.
#include <map>
#include <string>

#include "optim/flat.hpp"
#include "optim/optim_impl.hpp"

namespace kiln::optim {
namespace {

// The f32 master copy of a bf16/f16 parameter.
constexpr const char* master_name = "master";

std::string buffer_name(std::size_t param, const std::string& buffer) {
  return "state." + std::to_string(param) + "." + buffer;
}

// One number from a tensor of one element, as double.
double number(const std::string& fn, const std::string& name, const tensor& t) {
  if (!t.defined() || t.numel() != 1)
    throw shape_error(fn + ": \"" + name + "\" must hold one element" +
                      (t.defined() ? ", got shape " + to_string(t.shape()) : ""));
  return t.dtype() == scalar_type::f64 ? t.item<double>() : t.to(scalar_type::f64).item<double>();
}

}  // namespace

state_dict_t optimizer::state_dict() const {
  detail::optimizer_impl& o = detail::impl_of(impl_);
  const device& dev = o.groups.front().dev;
  state_dict_t out;
  const std::int64_t steps = detail::step_count_of(o);
  out.emplace_back("step", tensor::from(dev, std::vector<std::int64_t>{steps}, {}));
  out.emplace_back("lr", tensor::from(dev, std::vector<double>{o.lr}, {}));
  for (std::size_t i = 0; i < o.params.size(); ++i) {
    const detail::slot& s = o.slots[i];
    const detail::group& g = o.groups[s.group];
    for (std::size_t b = 0; b < o.rule.buffers.size(); ++b)
      out.emplace_back(buffer_name(i, o.rule.buffers[b]),
                       detail::read_slot(g, g.math, *g.state[b], s.offset, o.params[i].shape()));
    if (g.master)
      out.emplace_back(buffer_name(i, master_name),
                       detail::read_slot(g, g.math, *g.master, s.offset, o.params[i].shape()));
  }
  return out;
}

void optimizer::load_state_dict(const state_dict_t& state) {
  detail::optimizer_impl& o = detail::impl_of(impl_);
  const std::string short_fn = o.rule.name + "::load_state_dict";
  const std::string fn = "kiln::optim::" + short_fn;
  std::map<std::string, const tensor*> given;
  for (const auto& [name, t] : state)
    if (!given.emplace(name, &t).second)
      throw invalid_argument(fn + ": \"" + name + "\" is given twice");
  std::map<std::string, std::pair<std::size_t, std::size_t>> wanted;  // (param, buffer)
  const std::size_t master_at = o.rule.buffers.size();  // "buffer" index of the master
  for (std::size_t i = 0; i < o.params.size(); ++i) {
    for (std::size_t b = 0; b < o.rule.buffers.size(); ++b)
      wanted.emplace(buffer_name(i, o.rule.buffers[b]), std::pair{i, b});
    if (o.groups[o.slots[i].group].master)
      wanted.emplace(buffer_name(i, master_name), std::pair{i, master_at});
  }
  for (const char* name : {"step", "lr"})
    if (!given.count(name)) throw invalid_argument(fn + ": \"" + name + "\" is missing");
  for (const auto& [name, at] : wanted)
    if (!given.count(name)) throw invalid_argument(fn + ": \"" + name + "\" is missing");
  for (const auto& [name, t] : given) {
    if (name == "step" || name == "lr") continue;
    const auto w = wanted.find(name);
    if (w == wanted.end())
      throw invalid_argument(fn + ": \"" + name + "\" is not state of this " + o.rule.name +
                             " optimizer (" + std::to_string(o.params.size()) + " parameters)");
    const tensor& p = o.params[w->second.first];
    if (!t->defined() || t->shape() != p.shape())
      throw shape_error(fn + ": \"" + name + "\" is " +
                        (t->defined() ? to_string(t->shape()) : std::string("undefined")) +
                        ", the parameter " + to_string(p.shape()));
  }
  const double step = number(fn, "step", *given["step"]);
  const double lr = number(fn, "lr", *given["lr"]);
  detail::check_option(step >= 0 && step == static_cast<double>(static_cast<std::int64_t>(step)),
                       short_fn.c_str(), "step", "a whole number at least 0", step);
  detail::check_option(lr >= 0, short_fn.c_str(), "lr", "at least 0", lr);
  for (const auto& [name, at] : wanted) {
    const detail::slot& s = o.slots[at.first];
    const detail::group& g = o.groups[s.group];
    detail::write_slot(g, g.math, at.second == master_at ? *g.master : *g.state[at.second],
                       s.offset, *given[name]);
  }
  detail::set_step_count(o, static_cast<std::int64_t>(step));
  o.lr = lr;
}

}  // namespace kiln::optim
