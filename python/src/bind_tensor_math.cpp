// Operators, elementwise math, reductions and matmul on kiln.tensor: all lazy, fused by Kiln
// into one kernel per evaluation as in C++.
#include <pybind11/stl.h>

#include <string>

#include "bindings.hpp"
#include "kiln/tensor.hpp"
#include "kiln/tensor/linalg.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

#define KILN_PY_OP(expr) [](const auto& x, const auto& y) -> tensor { return expr; }

template <class F>
void binary(tensor_class& cls, const char* name, const char* rname, F f) {
  cls.def(
      name, [f](const tensor& a, py::handle b) { return with_operand<false>(a, b, f); },
      py::is_operator());
  if (rname)
    cls.def(
        rname, [f](const tensor& a, py::handle b) { return with_operand<true>(a, b, f); },
        py::is_operator());
}

// A two-operand function of the module (kiln.maximum(a, b)), either operand a tensor.
template <class F>
void binary_function(py::module_& m, const char* name, F f, const char* doc) {
  m.def(
      name,
      [f](py::handle a, py::handle b) {
        if (py::isinstance<tensor>(a)) return with_operand<false>(a.cast<const tensor&>(), b, f);
        if (py::isinstance<tensor>(b)) return with_operand<true>(b.cast<const tensor&>(), a, f);
        const tensor ta = tensor_from_data(a, py::none(), device::best());
        return with_operand<false>(ta, b, f);
      },
      py::arg("a"), py::arg("b"), doc);
}

using reduce_fn = tensor (tensor::*)(const axes&, bool) const;

void reduction(py::module_& m, tensor_class& cls, const char* name, reduce_fn f, const char* doc) {
  auto call = [f](const tensor& x, py::handle axis, bool keepdim) {
    return (x.*f)(to_axes(axis), keepdim);
  };
  cls.def(name, call, py::arg("axis") = py::none(), py::arg("keepdim") = false, doc);
  m.def(name, call, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdim") = false, doc);
}

using unary_entry = std::pair<const char*, unary_fn>;
constexpr unary_entry unary[] = {
    {"neg", &kiln::neg},       {"abs", &kiln::abs},
    {"sqrt", &kiln::sqrt},     {"exp", &kiln::exp},
    {"log", &kiln::log},       {"sin", &kiln::sin},
    {"cos", &kiln::cos},       {"tanh", &kiln::tanh},
    {"relu", &kiln::relu},     {"sigmoid", &kiln::sigmoid},
    {"tan", &kiln::tan},       {"rsqrt", &kiln::rsqrt},
    {"square", &kiln::square}, {"floor", &kiln::floor},
    {"ceil", &kiln::ceil},     {"transpose_copy", &kiln::transpose_copy}};

}  // namespace

unary_fn unary_function(std::string_view name) {
  for (const auto& [n, f] : unary)
    if (name == n) return f;
  return nullptr;
}

void bind_tensor_math(py::module_& m, tensor_class& cls) {
  binary(cls, "__add__", "__radd__", KILN_PY_OP(x + y));
  binary(cls, "__sub__", "__rsub__", KILN_PY_OP(x - y));
  binary(cls, "__mul__", "__rmul__", KILN_PY_OP(x * y));
  binary(cls, "__truediv__", "__rtruediv__", KILN_PY_OP(x / y));
  binary(cls, "__lt__", nullptr, KILN_PY_OP(x < y));
  binary(cls, "__le__", nullptr, KILN_PY_OP(x <= y));
  binary(cls, "__gt__", nullptr, KILN_PY_OP(x > y));
  binary(cls, "__ge__", nullptr, KILN_PY_OP(x >= y));
  binary(cls, "__eq__", nullptr, KILN_PY_OP(x == y));
  binary(cls, "__ne__", nullptr, KILN_PY_OP(x != y));
  binary(cls, "__pow__", "__rpow__", KILN_PY_OP(kiln::pow(x, y)));
  cls.attr("__hash__") = py::none();  // == is elementwise, as NumPy's
  cls.def("__neg__", [](const tensor& x) { return -x; })
      .def("__abs__", [](const tensor& x) { return kiln::abs(x); })
      .def(
          "__matmul__", [](const tensor& a, const tensor& b) { return kiln::matmul(a, b); },
          py::is_operator())
      .def(
          "__rmatmul__", [](const tensor& b, const tensor& a) { return kiln::matmul(a, b); },
          py::is_operator());

  // Elementwise functions, as methods and module functions (kiln.exp(x), x.exp()).
  for (const auto& [name, f] : unary) {
    cls.def(name, f);
    m.def(name, f, py::arg("x"));
  }
  auto gelu = [](const tensor& x, const std::string& approximate) {
    return kiln::gelu(x, approximate);
  };
  cls.def("gelu", gelu, py::arg("approximate") = "none");
  m.def("gelu", gelu, py::arg("x"), py::arg("approximate") = "none");
  binary_function(m, "pow", KILN_PY_OP(kiln::pow(x, y)), "Elementwise power, broadcast.");
  binary_function(m, "minimum", KILN_PY_OP(kiln::minimum(x, y)), "Elementwise std::min.");
  binary_function(m, "maximum", KILN_PY_OP(kiln::maximum(x, y)), "Elementwise std::max.");
  m.def(
      "where",
      [](const tensor& cond, py::handle a, py::handle b) {
        auto f = [&cond](const auto& x, const auto& y) -> tensor {
          return kiln::where(cond, x, y);
        };
        if (py::isinstance<tensor>(a)) return with_operand<false>(a.cast<const tensor&>(), b, f);
        if (py::isinstance<tensor>(b)) return with_operand<true>(b.cast<const tensor&>(), a, f);
        return with_operand<false>(tensor_from_data(a, py::none(), cond.get_device()), b, f);
      },
      py::arg("cond"), py::arg("a"), py::arg("b"), "cond ? a : b elementwise, broadcast.");
  auto clamp = [](const tensor& x, double lo, double hi) { return kiln::clamp(x, lo, hi); };
  cls.def("clamp", clamp, py::arg("min"), py::arg("max"));
  m.def("clamp", clamp, py::arg("x"), py::arg("min"), py::arg("max"));
  m.def(
      "matmul",
      [](const tensor& a, const tensor& b, bool tf32) {
        return kiln::matmul(a, b, matmul_options{.tf32 = tf32});
      },
      py::arg("a"), py::arg("b"), py::arg("tf32") = false,
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "gemm",
      [](const tensor& a, const tensor& b, const tensor& c, double alpha, double beta, bool trans_a,
         bool trans_b) { return kiln::gemm(a, b, c, alpha, beta, trans_a, trans_b); },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("alpha") = 1.0, py::arg("beta") = 0.0,
      py::arg("trans_a") = false, py::arg("trans_b") = false,
      py::call_guard<py::gil_scoped_release>(), "alpha * op(a) @ op(b) + beta * c.");

  // Reductions: lazy, fused with the elementwise work before them.
  reduction(m, cls, "sum", &tensor::sum, "Sum over axis (None: every axis); ints give int64.");
  reduction(m, cls, "mean", &tensor::mean, "Mean over axis; integers give float64.");
  reduction(m, cls, "max", &tensor::max, "Maximum over axis (NaN wins).");
  reduction(m, cls, "min", &tensor::min, "Minimum over axis (NaN wins).");
  reduction(m, cls, "argmax", &tensor::argmax, "Index of the maximum (None: of the flat tensor).");
  reduction(m, cls, "argmin", &tensor::argmin, "Index of the minimum (None: of the flat tensor).");
  auto var = [](const tensor& x, py::handle axis, std::int64_t correction, bool keepdim) {
    return x.var(to_axes(axis), correction, keepdim);
  };
  auto std_ = [](const tensor& x, py::handle axis, std::int64_t correction, bool keepdim) {
    return x.std(to_axes(axis), correction, keepdim);
  };
  auto norm = [](const tensor& x, double p, py::handle axis, bool keepdim) {
    return x.norm(p, to_axes(axis), keepdim);
  };
  cls.def("var", var, py::arg("axis") = py::none(), py::arg("correction") = 1,
          py::arg("keepdim") = false)
      .def("std", std_, py::arg("axis") = py::none(), py::arg("correction") = 1,
           py::arg("keepdim") = false)
      .def("norm", norm, py::arg("p") = 2.0, py::arg("axis") = py::none(),
           py::arg("keepdim") = false)
      .def("softmax", &tensor::softmax, py::arg("dim"))
      .def("log_softmax", &tensor::log_softmax, py::arg("dim"));
  m.def(
      "softmax", [](const tensor& x, int dim) { return x.softmax(dim); }, py::arg("x"),
      py::arg("dim"));
  m.def(
      "log_softmax", [](const tensor& x, int dim) { return x.log_softmax(dim); }, py::arg("x"),
      py::arg("dim"));
  m.def(
      "last_tensor_stats",
      [] {
        const tensor_stats s = last_tensor_stats();
        return py::dict(py::arg("kernel_launches") = s.kernel_launches,
                        py::arg("programs_compiled") = s.programs_compiled);
      },
      "Kernels launched and programs compiled by this thread's last evaluating call.");
}

}  // namespace kiln::python
