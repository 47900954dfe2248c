// Python values as tensor operands: a kiln.tensor, a Python scalar (typed as NumPy does: an int
// takes the tensor's dtype, a float a floating tensor's dtype, else float64), or anything NumPy
// turns into an array (copied to the tensor's device).
#pragma once

#include <pybind11/pybind11.h>

#include <string_view>

#include "dtype.hpp"
#include "kiln/tensor.hpp"

namespace kiln::python {
namespace py = pybind11;

// A new tensor from anything numpy.asarray accepts (copied to dev; dtype None keeps NumPy's).
tensor tensor_from_data(py::handle data, py::handle dtype, const device& dev);
// The elementwise functions bound as kiln.<name>(x) and x.<name>() (bind_tensor_math.cpp), by
// name; nullptr for another name. Placeholder trees (placeholders.cpp) call them too.
using unary_fn = tensor (*)(const tensor&);
unary_fn unary_function(std::string_view name);
// f(a, b) with b a tensor or a typed scalar; Reflected: f(b, a).
template <bool Reflected, class F>
tensor with_operand(const tensor& a, py::handle b, F&& f);
// The Python scalar's Kiln type beside a tensor of dtype t.
scalar_type scalar_type_beside(scalar_type t, py::handle value);
bool is_python_scalar(py::handle h);
// Axes argument: None (every axis), an int or a sequence of ints.
axes to_axes(py::handle h);
// normalized_shape (layer_norm, rms_norm): an int or a sequence of ints, as PyTorch takes it;
// TypeError naming what was passed otherwise.
shape_t to_normalized_shape(py::handle h);

template <bool Reflected, class F>
tensor with_operand(const tensor& a, py::handle b, F&& f) {
  auto call = [&](const auto& x) -> tensor {
    if constexpr (Reflected)
      return f(x, a);
    else
      return f(a, x);
  };
  if (py::isinstance<tensor>(b)) return call(b.cast<const tensor&>());
  if (is_python_scalar(b))
    return dispatch(scalar_type_beside(a.dtype(), b),
                    [&](auto zero) -> tensor { return call(cast_scalar<decltype(zero)>(b)); });
  return call(tensor_from_data(b, py::none(), a.get_device()));
}

}  // namespace kiln::python
