#include "placeholders.hpp"

#include <string>
#include <string_view>

#include "kiln/error.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

struct not_native {};  // the tree needs Python: the caller applies it there

// An operand: a lazy tensor, or a Python number beside one.
struct operand {
  std::optional<tensor> t;
  py::handle number;
};

operand value_of(py::handle node, const std::vector<tensor>& comps,
                 const std::function<tensor()>& index);

tensor tensor_of(py::handle node, const std::vector<tensor>& comps,
                 const std::function<tensor()>& index) {
  operand o = value_of(node, comps, index);
  if (!o.t) throw not_native{};
  return std::move(*o.t);
}

// a op b, as kiln.tensor's operators: a number takes its type from the tensor beside it.
template <class F>
tensor arithmetic(const operand& a, const operand& b, F f) {
  if (a.t && b.t) return f(*a.t, *b.t);
  if (a.t) return with_operand<false>(*a.t, b.number, f);
  if (b.t) return with_operand<true>(*b.t, a.number, f);
  throw not_native{};
}

// A comparison with the number first is the mirrored one with the tensor first, as Python
// itself turns `2 < t` into `t > 2`.
template <class F, class Mirrored>
tensor comparison(const operand& a, const operand& b, F f, Mirrored mirrored) {
  if (!a.t && b.t) return with_operand<false>(*b.t, a.number, mirrored);
  return arithmetic(a, b, f);
}

#define KILN_PY_OP(expr) [](const auto& x, const auto& y) -> tensor { return expr; }

tensor binary(std::string_view op, const operand& a, const operand& b) {
  if (op == "+") return arithmetic(a, b, KILN_PY_OP(x + y));
  if (op == "-") return arithmetic(a, b, KILN_PY_OP(x - y));
  if (op == "*") return arithmetic(a, b, KILN_PY_OP(x * y));
  if (op == "/") return arithmetic(a, b, KILN_PY_OP(x / y));
  if (op == "**") return arithmetic(a, b, KILN_PY_OP(kiln::pow(x, y)));
  if (op == "<") return comparison(a, b, KILN_PY_OP(x < y), KILN_PY_OP(x > y));
  if (op == "<=") return comparison(a, b, KILN_PY_OP(x <= y), KILN_PY_OP(x >= y));
  if (op == ">") return comparison(a, b, KILN_PY_OP(x > y), KILN_PY_OP(x < y));
  if (op == ">=") return comparison(a, b, KILN_PY_OP(x >= y), KILN_PY_OP(x <= y));
  if (op == "==") return comparison(a, b, KILN_PY_OP(x == y), KILN_PY_OP(x == y));
  if (op == "!=") return comparison(a, b, KILN_PY_OP(x != y), KILN_PY_OP(x != y));
  throw not_native{};
}

#undef KILN_PY_OP

// kiln.<name>(x), the function Python's getattr(kiln, name) would call.
tensor math(std::string_view name, const tensor& x) {
  if (const unary_fn f = unary_function(name)) return f(x);
  throw not_native{};
}

operand value_of(py::handle node, const std::vector<tensor>& comps,
                 const std::function<tensor()>& index) {
  if (!PyTuple_Check(node.ptr()) || PyTuple_GET_SIZE(node.ptr()) < 1) throw not_native{};
  const auto item = [&](Py_ssize_t i) -> py::handle {
    if (i >= PyTuple_GET_SIZE(node.ptr())) throw not_native{};
    return PyTuple_GET_ITEM(node.ptr(), i);
  };
  py::handle head = item(0);
  if (!PyUnicode_Check(head.ptr())) throw not_native{};
  Py_ssize_t len = 0;
  const char* s = PyUnicode_AsUTF8AndSize(head.ptr(), &len);
  if (!s) throw py::error_already_set();
  const std::string_view op(s, static_cast<std::size_t>(len));
  if (op == "arg") {
    const auto k = item(1).cast<std::size_t>();
    if (k >= comps.size())
      throw invalid_argument("kiln query: _" + std::to_string(k + 1) + " names component " +
                             std::to_string(k + 1) + " of elements of " +
                             std::to_string(comps.size()));
    return {comps[k], {}};
  }
  if (op == "const") {
    py::handle v = item(1);
    // Python's own numbers only: NumPy scalars and arrays keep their Python path.
    if (!PyLong_CheckExact(v.ptr()) && !PyFloat_CheckExact(v.ptr()) && !PyBool_Check(v.ptr()))
      throw not_native{};
    return {std::nullopt, v};
  }
  if (op == "index") return {index(), {}};
  if (op == "neg") return {-tensor_of(item(1), comps, index), {}};
  if (op == "abs") return {kiln::abs(tensor_of(item(1), comps, index)), {}};
  if (op == "call") {
    if (!PyUnicode_Check(item(1).ptr())) throw not_native{};
    return {math(item(1).cast<std::string>(), tensor_of(item(2), comps, index)), {}};
  }
  const operand a = value_of(item(1), comps, index), b = value_of(item(2), comps, index);
  return {binary(op, a, b), {}};
}

}  // namespace

std::optional<tensor> placeholder_value(py::handle node, const std::vector<tensor>& components,
                                        const std::function<tensor()>& index) {
  try {
    operand o = value_of(node, components, index);
    if (!o.t) return std::nullopt;
    return std::move(*o.t);
  } catch (const not_native&) {
    return std::nullopt;
  }
}

}  // namespace kiln::python
