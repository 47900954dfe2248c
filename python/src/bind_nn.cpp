// kiln.nn (modules, losses, models) and kiln.optim (optimizers, schedulers).
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/attention.hpp"
#include "kiln/nn/embedding.hpp"
#include "kiln/nn/models.hpp"
#include "kiln/nn/normalization.hpp"
#include "kiln/optim.hpp"
#include "kiln/optim/clip.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

// A Python subclass of kiln.nn.module: forward (and describe) come from Python, and the
// protected registration calls are callable from its methods.
class py_module : public nn::module {
 public:
  // Not PYBIND11_OVERRIDE_PURE: without an override it calls pybind11_fail after dropping the
  // GIL it took, and pybind11 2.13's pybind11_fail asserts on PyErr_Occurred(), which needs the
  // GIL (a crash where the module is called under a released GIL, as __call__ is).
  tensor forward(const tensor& x) const override {
    py::gil_scoped_acquire gil;
    if (py::function f = py::get_override(static_cast<const nn::module*>(this), "forward"))
      return f(x).cast<tensor>();
    throw py::type_error(
        "kiln.nn.module: " +
        std::string(py::str(
            py::type::of(py::cast(this, py::return_value_policy::reference)).attr("__name__"))) +
        " has no forward(self, x)");
  }
  std::string describe() const override { PYBIND11_OVERRIDE(std::string, nn::module, describe); }
  using nn::module::add_child;
  using nn::module::register_buffer;
  using nn::module::register_parameter;
};

using module_class = py::class_<nn::module, py_module, std::shared_ptr<nn::module>>;

py_module& python_subclass(nn::module& m, const char* fn) {
  auto* p = dynamic_cast<py_module*>(&m);
  if (!p)
    throw py::type_error(std::string("kiln.nn.module.") + fn +
                         ": only for subclasses of kiln.nn.module written in Python");
  return *p;
}

// The module as C++ holds it. A Python subclass's C++ part cannot call forward once its Python
// object is gone, so the pointer handed to a container keeps that object alive.
std::shared_ptr<nn::module> hold(py::handle h) {
  std::shared_ptr<nn::module> sp = h.cast<std::shared_ptr<nn::module>>();
  if (!dynamic_cast<py_module*>(sp.get())) return sp;
  auto* keep = new py::object(py::reinterpret_borrow<py::object>(h));
  nn::module* raw = sp.get();
  return std::shared_ptr<nn::module>(raw, [keep](nn::module*) {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) return;  // at exit it goes with the interpreter
    py::gil_scoped_acquire gil;
    delete keep;
  });
}

py::dict to_dict(const nn::named_tensors& xs) {
  py::dict d;
  for (const auto& [name, t] : xs) d[py::str(name)] = t;
  return d;
}

nn::named_tensors from_dict(const py::dict& d) {
  nn::named_tensors out;
  for (auto [k, v] : d) out.emplace_back(k.cast<std::string>(), v.cast<tensor>());
  return out;
}

nn::layer_options layer_options(bool bias, py::handle dtype, std::uint64_t seed) {
  return nn::layer_options{.bias = bias,
                           .dtype = dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype),
                           .seed = seed};
}

template <class M>
py::class_<M, nn::module, std::shared_ptr<M>> layer(py::module_& m, const char* name,
                                                    const char* doc) {
  return py::class_<M, nn::module, std::shared_ptr<M>>(m, name, doc);
}

// A parameter a module may lack (bias=False): None then. Read-only: the module's parameter
// list holds the handle, so assigning another tensor would leave it behind (load_state_dict
// writes values in place instead).
template <class M>
auto optional_parameter(tensor M::*member) {
  return [member](const M& m) -> py::object {
    const tensor& t = m.*member;
    return t.defined() ? py::cast(t) : py::none();
  };
}

scalar_type dtype_or_f32(py::handle dtype) {
  return dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype);
}

// The transformer layers: torch.nn.LayerNorm, RMSNorm, Embedding and MultiheadAttention
// (batch_first, no dropout), with PyTorch's state_dict names.
void bind_transformer_modules(py::module_& nn_m) {
  layer<nn::layer_norm>(nn_m, "layer_norm", "torch.nn.LayerNorm over the trailing dims.")
      .def(py::init([](py::handle shape, double eps, bool affine, bool bias, py::handle dtype,
                       py::handle dev) {
             return std::make_shared<nn::layer_norm>(
                 to_device(dev), to_normalized_shape(shape), eps,
                 nn::norm_options{
                     .elementwise_affine = affine, .bias = bias, .dtype = dtype_or_f32(dtype)});
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("bias") = true, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def_property_readonly("weight", optional_parameter(&nn::layer_norm::weight))
      .def_property_readonly("bias", optional_parameter(&nn::layer_norm::bias))
      .def_property_readonly(
          "normalized_shape",
          [](const nn::layer_norm& m) { return py::tuple(py::cast(m.normalized_shape)); })
      .def_readonly("eps", &nn::layer_norm::eps);
  layer<nn::rms_norm>(nn_m, "rms_norm", "torch.nn.RMSNorm over the trailing dims.")
      .def(py::init([](py::handle shape, std::optional<double> eps, bool affine, py::handle dtype,
                       py::handle dev) {
             return std::make_shared<nn::rms_norm>(
                 to_device(dev), to_normalized_shape(shape), eps,
                 nn::norm_options{.elementwise_affine = affine, .dtype = dtype_or_f32(dtype)});
           }),
           py::arg("normalized_shape"), py::arg("eps") = py::none(),
           py::arg("elementwise_affine") = true, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def_property_readonly("weight", optional_parameter(&nn::rms_norm::weight))
      .def_property_readonly(
          "normalized_shape",
          [](const nn::rms_norm& m) { return py::tuple(py::cast(m.normalized_shape)); })
      .def_readonly("eps", &nn::rms_norm::eps);
  layer<nn::embedding>(nn_m, "embedding",
                       "torch.nn.Embedding: int indices [...] -> rows of weight [..., dim].")
      .def(py::init([](std::int64_t n, std::int64_t dim, py::handle dtype, std::uint64_t seed,
                       py::handle dev) {
             return std::make_shared<nn::embedding>(to_device(dev), n, dim,
                                                    layer_options(false, dtype, seed));
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("seed") = 0, py::arg("device") = py::none())
      .def_property_readonly("weight", [](const nn::embedding& m) { return m.weight; });
  layer<nn::multi_head_attention>(
      nn_m, "multi_head_attention",
      "torch.nn.MultiheadAttention(batch_first=True) without dropout: module(x) is "
      "self-attention over x [batch, tokens, embed_dim], attend(query, key, value, mask) "
      "cross-attention.")
      .def(py::init([](std::int64_t embed_dim, std::int64_t heads, bool bias, bool causal,
                       py::handle dtype, std::uint64_t seed, py::handle dev) {
             return std::make_shared<nn::multi_head_attention>(
                 to_device(dev), embed_dim, heads,
                 nn::attention_options{
                     .bias = bias, .causal = causal, .dtype = dtype_or_f32(dtype), .seed = seed});
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::kw_only(), py::arg("bias") = true,
           py::arg("causal") = false, py::arg("dtype") = py::none(), py::arg("seed") = 0,
           py::arg("device") = py::none())
      .def(
          "attend",
          [](const nn::multi_head_attention& m, const tensor& q, const tensor& k, const tensor& v,
             const std::optional<tensor>& mask) {
            return m.attend(q, k, v, mask ? *mask : tensor{});
          },
          py::arg("query"), py::arg("key"), py::arg("value"), py::arg("mask") = py::none(),
          py::call_guard<py::gil_scoped_release>(),
          "query [batch, L, E], key and value [batch, S, E]; mask as "
          "scaled_dot_product_attention's attn_mask (causal per the options when None).")
      .def_property_readonly("in_proj_weight",
                             [](const nn::multi_head_attention& m) { return m.in_proj_weight; })
      .def_property_readonly("in_proj_bias",
                             optional_parameter(&nn::multi_head_attention::in_proj_bias))
      .def_readonly("out_proj", &nn::multi_head_attention::out_proj)
      .def_readonly("embed_dim", &nn::multi_head_attention::embed_dim)
      .def_readonly("num_heads", &nn::multi_head_attention::num_heads)
      .def_readonly("causal", &nn::multi_head_attention::causal);
}

void bind_modules(py::module_& nn_m) {
  module_class(nn_m, "module", py::dynamic_attr(), R"(Base of Kiln's layers; subclass it in Python:

    class mlp(kiln.nn.module):
        def __init__(self):
            super().__init__()
            self.fc1 = kiln.nn.linear(784, 64)     # a module attribute is registered as "fc1"
            self.scale = self.register_parameter("scale", kiln.ones(64))
        def forward(self, x):
            return self.fc1(x).relu() * self.scale)")
      .def(py::init<>())
      .def(
          "register_parameter",
          [](nn::module& m, std::string name, const tensor& t) {
            return python_subclass(m, "register_parameter").register_parameter(std::move(name), t);
          },
          py::arg("name"), py::arg("tensor"),
          "Makes the tensor a leaf that requires a gradient, saved in state_dict; returns it.")
      .def(
          "register_buffer",
          [](nn::module& m, std::string name, const tensor& t) {
            return python_subclass(m, "register_buffer").register_buffer(std::move(name), t);
          },
          py::arg("name"), py::arg("tensor"), "State saved in state_dict but not trained.")
      .def(
          "register_module",
          [](nn::module& m, std::string name, py::handle child) {
            python_subclass(m, "register_module").add_child(std::move(name), hold(child));
            return child;
          },
          py::arg("name"), py::arg("module"),
          "A child module (its parameters join this one's, named 'name.*'); returns it.")
      .def("_is_python_subclass",
           [](nn::module& m) { return dynamic_cast<py_module*>(&m) != nullptr; })
      // Without the GIL: products and convolutions may run at once (the rest is lazy).
      .def("forward", &nn::module::forward, py::arg("x"), py::call_guard<py::gil_scoped_release>())
      .def("__call__", &nn::module::forward, py::arg("x"), py::call_guard<py::gil_scoped_release>())
      .def("parameters", &nn::module::parameters)
      .def("named_parameters", &nn::module::named_parameters)
      .def("named_buffers", &nn::module::named_buffers)
      .def("state_dict", [](const nn::module& mod) { return to_dict(mod.state_dict()); })
      .def(
          "load_state_dict",
          [](nn::module& mod, const py::dict& d, bool strict) {
            mod.load_state_dict(from_dict(d), strict);
          },
          py::arg("state"), py::arg("strict") = true)
      .def("parameter_count", &nn::module::parameter_count)
      .def(
          "train", [](nn::module& mod, bool on) { mod.train(on); }, py::arg("mode") = true)
      .def("eval", [](nn::module& mod) { mod.eval(); })
      .def_property_readonly("training", &nn::module::is_training)
      .def("__repr__", &nn::module::to_string);

  py::class_<nn::sequential, nn::module, std::shared_ptr<nn::sequential>>(
      nn_m, "sequential", "Modules applied in order: kiln.nn.sequential(linear, relu(), ...).")
      .def(py::init([](py::args mods) {
        auto s = std::make_shared<nn::sequential>();
        for (py::handle h : mods) s->push_back(hold(h));
        return s;
      }))
      .def(
          "append", [](nn::sequential& s, py::handle m) { s.push_back(hold(m)); },
          py::arg("module"))
      .def("__len__", &nn::sequential::size)
      .def("__getitem__", [](const nn::sequential& s, std::size_t i) {
        if (i >= s.size()) throw py::index_error("kiln.nn.sequential: index out of range");
        return s.children()[i].second;
      });

  layer<nn::linear>(nn_m, "linear", "y = x @ weight.T + bias.")
      .def(py::init([](std::int64_t in, std::int64_t out, bool bias, py::handle dtype,
                       std::uint64_t seed, py::handle dev) {
             return std::make_shared<nn::linear>(to_device(dev), in, out,
                                                 layer_options(bias, dtype, seed));
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("seed") = 0, py::arg("device") = py::none())
      .def_readwrite("weight", &nn::linear::weight)
      .def_readwrite("bias", &nn::linear::bias);
  layer<nn::conv2d>(nn_m, "conv2d", "2-D convolution over [N, C, H, W].")
      .def(py::init([](std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                       std::int64_t padding, bool bias, py::handle dtype, std::uint64_t seed,
                       py::handle dev) {
             conv2d_options c;
             c.stride = {stride, stride};
             c.padding = {padding, padding};
             return std::make_shared<nn::conv2d>(to_device(dev), in, out, kernel, c,
                                                 layer_options(bias, dtype, seed));
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("bias") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("seed") = 0, py::arg("device") = py::none())
      .def_readwrite("weight", &nn::conv2d::weight)
      .def_readwrite("bias", &nn::conv2d::bias);
  layer<nn::max_pool2d>(nn_m, "max_pool2d", "Max pooling with a square window.")
      .def(py::init<std::int64_t>(), py::arg("kernel_size"));
  layer<nn::avg_pool2d>(nn_m, "avg_pool2d", "Average pooling with a square window.")
      .def(py::init<std::int64_t>(), py::arg("kernel_size"));
  layer<nn::dropout>(nn_m, "dropout", "Zeroes elements with probability p while training.")
      .def(py::init<double, std::uint64_t>(), py::arg("p") = 0.5, py::arg("seed") = 0);
  layer<nn::flatten>(nn_m, "flatten", "Flattens dimensions start_dim..end_dim.")
      .def(py::init<int, int>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  layer<nn::relu>(nn_m, "relu", "max(x, 0).").def(py::init<>());
  layer<nn::sigmoid>(nn_m, "sigmoid", "1 / (1 + exp(-x)).").def(py::init<>());
  layer<nn::tanh>(nn_m, "tanh", "tanh(x).").def(py::init<>());
  layer<nn::gelu>(nn_m, "gelu", "x * Phi(x).").def(py::init<>());
  layer<nn::softmax>(nn_m, "softmax", "softmax along dim.")
      .def(py::init<int>(), py::arg("dim") = -1);
  layer<nn::log_softmax>(nn_m, "log_softmax", "log(softmax) along dim, stably.")
      .def(py::init<int>(), py::arg("dim") = -1);
  bind_transformer_modules(nn_m);

  nn_m.def("mse_loss", &nn::mse_loss, py::arg("input"), py::arg("target"),
           py::arg("reduction") = "mean", py::call_guard<py::gil_scoped_release>());
  nn_m.def("cross_entropy", &nn::cross_entropy, py::arg("logits"), py::arg("labels"),
           py::arg("reduction") = "mean",
           "Softmax cross entropy of logits [N, C], int labels [N].");
  nn_m.def("binary_cross_entropy_with_logits", &nn::binary_cross_entropy_with_logits,
           py::arg("logits"), py::arg("targets"), py::arg("reduction") = "mean",
           py::call_guard<py::gil_scoped_release>());
  nn_m.def("manual_seed", &nn::manual_seed, py::arg("seed"),
           "Restarts the sequence of seeds that layers' initialisation draws from.");

  py::module_ models = nn_m.def_submodule("models", "Kiln's reference models.");
  auto model = [&models](const char* name, nn::sequential (*f)(const device&, scalar_type)) {
    models.def(
        name,
        [f](py::handle dev, py::handle dtype) {
          return std::make_shared<nn::sequential>(
              f(to_device(dev), dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype)));
        },
        py::arg("device") = py::none(), py::arg("dtype") = py::none());
  };
  model("mlp", &nn::models::mlp);
  model("mlp_wide", &nn::models::mlp_wide);
  models.def("sample_shape", &nn::models::sample_shape, py::arg("name"),
             "The shape of one input sample of the model (without the batch dimension).");
}

void bind_optim(py::module_& om) {
  py::class_<optim::optimizer>(om, "optimizer", "step() updates every parameter in one kernel.")
      .def("step", &optim::optimizer::step, py::call_guard<py::gil_scoped_release>())
      .def("zero_grad", &optim::optimizer::zero_grad, py::call_guard<py::gil_scoped_release>())
      .def_property("lr", &optim::optimizer::lr, &optim::optimizer::set_lr)
      .def_property_readonly("step_count", &optim::optimizer::step_count)
      .def_property_readonly("name", &optim::optimizer::name)
      .def("parameters", &optim::optimizer::parameters)
      .def("state_dict", [](const optim::optimizer& o) { return to_dict(o.state_dict()); })
      .def("load_state_dict",
           [](optim::optimizer& o, const py::dict& d) { o.load_state_dict(from_dict(d)); });
  om.def(
      "sgd",
      [](const std::vector<tensor>& params, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov) {
        return optim::sgd(params, {lr, momentum, dampening, weight_decay, nesterov});
      },
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0,
      py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  om.def(
      "adam",
      [](const std::vector<tensor>& params, double lr, std::pair<double, double> betas, double eps,
         double weight_decay, bool amsgrad) {
        return optim::adam(params, {lr, betas.first, betas.second, eps, weight_decay, amsgrad});
      },
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair{0.9, 0.999},
      py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("amsgrad") = false);
  om.def(
      "adamw",
      [](const std::vector<tensor>& params, double lr, std::pair<double, double> betas, double eps,
         double weight_decay, bool amsgrad, std::optional<std::vector<tensor>> no_decay) {
        return optim::adamw(params, {lr, betas.first, betas.second, eps, weight_decay, amsgrad,
                                     no_decay ? std::move(*no_decay) : std::vector<tensor>{}});
      },
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair{0.9, 0.999},
      py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false,
      py::arg("no_weight_decay") = py::none(),
      "AdamW; no_weight_decay: parameters (of params) stepped without weight decay, as "
      "decay_split(params) gives.");
  om.def("decay_split", &optim::decay_split, py::arg("params"),
         "The parameters GPT recipes exempt from weight decay: those of fewer than 2 dims.");
  om.def(
      "rmsprop",
      [](const std::vector<tensor>& params, double lr, double alpha, double eps,
         double weight_decay, double momentum, bool centered) {
        return optim::rmsprop(params, {lr, alpha, eps, weight_decay, momentum, centered});
      },
      py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
      py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0, py::arg("centered") = false);
  om.def(
      "adagrad",
      [](const std::vector<tensor>& params, double lr, double lr_decay, double weight_decay,
         double initial_accumulator_value, double eps) {
        return optim::adagrad(params, {lr, lr_decay, weight_decay, initial_accumulator_value, eps});
      },
      py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0,
      py::arg("weight_decay") = 0.0, py::arg("initial_accumulator_value") = 0.0,
      py::arg("eps") = 1e-10);
  py::class_<optim::step_lr>(om, "step_lr", "lr *= gamma every step_size epochs.")
      .def(py::init<optim::optimizer, std::int64_t, double>(), py::arg("optimizer"),
           py::arg("step_size"), py::arg("gamma") = 0.1)
      .def("step", &optim::step_lr::step)
      .def_property_readonly("last_lr", &optim::step_lr::last_lr);
  py::class_<optim::cosine_annealing_lr>(om, "cosine_annealing_lr", "Cosine from lr to eta_min.")
      .def(py::init<optim::optimizer, std::int64_t, double>(), py::arg("optimizer"),
           py::arg("t_max"), py::arg("eta_min") = 0.0)
      .def("step", &optim::cosine_annealing_lr::step)
      .def_property_readonly("last_lr", &optim::cosine_annealing_lr::last_lr);
  py::class_<optim::warmup_cosine_lr>(
      om, "warmup_cosine_lr",
      "Per optimizer step: linear warm-up to lr over `warmup` steps, then a cosine down to "
      "eta_min at step `total` (nanoGPT's schedule).")
      .def(py::init<optim::optimizer, std::int64_t, std::int64_t, double>(), py::arg("optimizer"),
           py::arg("warmup"), py::arg("total"), py::arg("eta_min") = 0.0)
      .def("step", &optim::warmup_cosine_lr::step)
      .def_property_readonly("last_lr", &optim::warmup_cosine_lr::last_lr)
      .def_property_readonly("last_step", &optim::warmup_cosine_lr::last_step);
  om.def("clip_grad_norm_", &optim::clip_grad_norm_, py::arg("optimizer"), py::arg("max_norm"),
         py::call_guard<py::gil_scoped_release>(),
         "Scales the optimizer's gradients in place to a global L2 norm <= max_norm; returns "
         "the norm before clipping (rank 0, float32; on the device, no sync).");
}

}  // namespace

void bind_nn(py::module_& m) {
  py::module_ nn_m = m.def_submodule("nn", "Layers, losses and models.");
  bind_modules(nn_m);
  py::module_ om = m.def_submodule("optim", "Optimizers and learning-rate schedules.");
  bind_optim(om);
}

}  // namespace kiln::python
