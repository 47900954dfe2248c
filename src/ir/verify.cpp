#include "ir/verify.hpp"

namespace kiln::ir {
namespace {

// The dtype rule of n's class, given that its operands exist.
const char* dtype_error(const graph& g, const node& n) {
  auto t = [&](int k) { return g[n.operands[k]].dtype; };
  switch (info(n.o).cls) {
    case op_class::arithmetic:
    case op_class::math:
      for (int k = 0; k < info(n.o).arity; ++k)
        if (t(k) != n.dtype) return "an operand's dtype differs from the result's";
      return nullptr;
    case op_class::compare:
      if (t(0) != t(1)) return "compared operands differ in dtype";
      return n.dtype == scalar_type::boolean ? nullptr : "a comparison must give bool";
    case op_class::logical: return n.dtype == scalar_type::boolean ? nullptr : "must give bool";
    case op_class::shift: return t(0) == n.dtype ? nullptr : "shifted operand differs in dtype";
    case op_class::unary:
      if (n.o == op::lnot) return n.dtype == scalar_type::boolean ? nullptr : "! must give bool";
      return t(0) == n.dtype ? nullptr : "the operand's dtype differs from the result's";
    case op_class::select:
      return t(1) == n.dtype && t(2) == n.dtype ? nullptr : "select's choices differ in dtype";
    case op_class::cast: return nullptr;
    case op_class::reduce:
      if (n.o == op::argmax || n.o == op::argmin)
        return n.dtype == scalar_type::i64 ? nullptr : "argmax/argmin must give int64";
      return t(0) == n.dtype ? nullptr : "a reduction's operand differs from its result in dtype";
    case op_class::leaf:
      if (n.o == op::capture && g.captures[n.slot].type != n.dtype)
        return "a capture leaf's dtype differs from its slot's";
      return n.o == op::index && n.dtype != scalar_type::i64 ? "index must be int64" : nullptr;
  }
  return nullptr;
}

}  // namespace

std::string verify(const graph& g) {
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const node& n = g.nodes[i];
    const std::string at = "node %" + std::to_string(i) + " (" + info(n.o).name + "): ";
    for (int k = 0; k < max_arity; ++k) {
      const node_id x = n.operands[k];
      if (k < info(n.o).arity && (x < 0 || static_cast<std::size_t>(x) >= i))
        return at + "operand " + std::to_string(k) + " is not an earlier node";
      if (k >= info(n.o).arity && x != -1) return at + "too many operands";
    }
    if (n.o == op::capture && (n.slot < 0 || static_cast<std::size_t>(n.slot) >= g.captures.size()))
      return at + "no such capture slot";
    if (n.o == op::load) {
      if (n.slot < 0 || static_cast<std::size_t>(n.slot) >= g.inputs.size())
        return at + "no such input";
      if (g.inputs[static_cast<std::size_t>(n.slot)].type != n.dtype)
        return at + "a load's dtype differs from its input's";
    }
    if (const char* e = dtype_error(g, n)) return at + e;
  }
  for (node_id r : g.roots)
    if (r < 0 || static_cast<std::size_t>(r) >= g.nodes.size()) return "a root is not a node";
  return {};
}

}  // namespace kiln::ir
