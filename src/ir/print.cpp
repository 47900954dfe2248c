#include "ir/print.hpp"

namespace kiln::ir {

// Appends only: GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + std::string&&.
std::string print(const graph& g) {
  std::string s;
  const auto num = [&](const char* before, std::int64_t v) {
    s.append(before).append(std::to_string(v));
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const node& n = g.nodes[i];
    num("%", static_cast<std::int64_t>(i));
    s.append(" = ").append(info(n.o).name).append(" ").append(type_name(n.dtype));
    if (info(n.o).cls == op_class::leaf) num(" #", n.slot);
    for (int k = 0; k < info(n.o).arity; ++k) num(k ? ", %" : " %", n.operands[k]);
    s.append("\n");
  }
  for (std::size_t i = 0; i < g.captures.size(); ++i) {
    num("capture #", static_cast<std::int64_t>(i));
    s.append(": ").append(type_name(g.captures[i].type)).append("\n");
  }
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const layout& l = g.inputs[i].l;
    num("input #", static_cast<std::int64_t>(i));
    s.append(": ").append(type_name(g.inputs[i].type)).append(" strides [");
    for (int k = 0; k < l.rank; ++k) num(k ? ", " : "", l.strides[k]);
    s.append("]\n");
  }
  s.append("roots:");
  for (node_id r : g.roots) num(" %", r);
  return s.append("\n");
}

}  // namespace kiln::ir
