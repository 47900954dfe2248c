// Questions about an expression's subtree.
#pragma once

#include "kiln/ir/node.hpp"

namespace kiln::ir {

// Whether any node under root (root included) satisfies pred.
template <class Pred>
bool any_of(const graph& g, node_id root, const Pred& pred) {
  const node& n = g[root];
  if (pred(n)) return true;
  for (int k = 0; k < info(n.o).arity; ++k)
    if (any_of(g, n.operands[k], pred)) return true;
  return false;
}

}  // namespace kiln::ir
