// Checks a graph's invariants: operands precede their users and match each op's arity,
// capture slots exist, and dtypes follow each op class's rule (kiln/ir/node.hpp).
#pragma once

#include <string>

#include "kiln/ir/node.hpp"

namespace kiln::ir {

// Empty when the graph is well formed; otherwise what is wrong with the first bad node.
std::string verify(const graph& g);

}  // namespace kiln::ir
