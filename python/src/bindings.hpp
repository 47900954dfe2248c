// The binding files' entry points (module.cpp calls them in order: a type is registered before
// the functions whose signatures name it).
#pragma once

#include <pybind11/pybind11.h>

#include "kiln/tensor.hpp"

namespace kiln::python {
namespace py = pybind11;
using tensor_class = py::class_<kiln::tensor>;

void bind_errors(py::module_& m);
void bind_dtype(py::module_& m);
void bind_device(py::module_& m);
tensor_class bind_tensor(py::module_& m);
void bind_tensor_math(py::module_& m, tensor_class& cls);
void bind_autograd(py::module_& m, tensor_class& cls);
void bind_nn(py::module_& m);
void bind_kernel(py::module_& m);
void bind_dlpack(py::module_& m, tensor_class& cls);
void bind_transformer(py::module_& m, tensor_class& cls);  // layer norm, indexing, attention
void bind_query(py::module_& m);  // kiln.query's run-time plans (python/kiln/query.py)
void bind_amp(py::module_& m);    // kiln.autocast, kiln.optim.grad_scaler (after bind_nn)

}  // namespace kiln::python
