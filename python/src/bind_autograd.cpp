// Autograd on kiln.tensor: requires_grad, backward, grad, detach, kiln.no_grad().
#include <memory>

#include "bindings.hpp"
#include "kiln/tensor.hpp"
#include "kiln/tensor/autograd.hpp"

namespace kiln::python {
namespace {

// `with kiln.no_grad():` holds a kiln::no_grad (or enable_grad) for the block. Kiln's switch
// is per thread: enter and exit on the same thread, as a with-block does.
template <class Guard>
struct grad_mode {
  std::unique_ptr<Guard> guard;
  void enter() { guard = std::make_unique<Guard>(); }
  void exit(py::args) { guard.reset(); }
};

template <class Guard>
void bind_grad_mode(py::module_& m, const char* name, const char* doc) {
  using mode = grad_mode<Guard>;
  py::class_<mode>(m, name, doc)
      .def(py::init<>())
      .def("__enter__", &mode::enter)
      .def("__exit__", &mode::exit);
}

}  // namespace

void bind_autograd(py::module_& m, tensor_class& cls) {
  cls.def_property(
         "requires_grad", &tensor::requires_grad, [](tensor& x, bool on) { x.requires_grad_(on); },
         "Whether backward() computes a gradient for it; set on a floating leaf.")
      .def(
          "requires_grad_", [](tensor& x, bool on) { return x.requires_grad_(on); },
          py::arg("requires_grad") = true)
      .def_property_readonly("is_leaf", &tensor::is_leaf)
      .def_property(
          "grad",
          [](const tensor& x) -> py::object {
            tensor g = x.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](const tensor& x, py::object g) {
            x.set_grad(g.is_none() ? tensor{} : g.cast<tensor>());
          },
          "The accumulated gradient, or None before the first backward().")
      .def("retain_grad", &tensor::retain_grad)
      .def(
          "backward",
          [](const tensor& x, py::object gradient, bool retain_graph) {
            const tensor g = gradient.is_none() ? tensor{} : gradient.cast<tensor>();
            py::gil_scoped_release release;
            x.backward(g, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          "Reverse mode from this tensor (one element, or with gradient of its shape); leaves' "
          "grad accumulate. Runs without the GIL.")
      .def("detach", &tensor::detach);
  m.def("is_grad_enabled", &is_grad_enabled);
  bind_grad_mode<no_grad>(m, "no_grad", "with kiln.no_grad(): operations are not recorded.");
  bind_grad_mode<enable_grad>(m, "enable_grad", "with kiln.enable_grad(): recording again.");
}

}  // namespace kiln::python
