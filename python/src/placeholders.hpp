// Placeholder expression trees (python/kiln/query.py, _expr._node) as lazy tensors, built in
// one call into the module: kiln.query's stages cost one crossing each instead of one per
// operator and leaf.
//
//   ("+", ("*", ("arg", 0), ("const", 2)), ("const", 1))   # kiln._1 * 2 + 1
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <optional>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::python {

// The tree over the element's components (and index(), called only for an _i), with kiln.tensor's
// Python operator rules for numbers beside tensors. nullopt where only Python can apply it: a
// constant that is not a Python int, float or bool, or a tree that is a constant. Errors as
// the Python operators': an _k past the element's components is kiln.invalid_argument.
std::optional<tensor> placeholder_value(pybind11::handle node,
                                        const std::vector<tensor>& components,
                                        const std::function<tensor()>& index);

}  // namespace kiln::python
