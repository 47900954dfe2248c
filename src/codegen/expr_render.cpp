#include "codegen/expr_render.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "codegen/text.hpp"

namespace kiln::codegen {
namespace {

using ir::op;
using ir::op_class;

const char* spelling(op o) {
  switch (o) {
    case op::add: return " + ";
    case op::sub: return " - ";
    case op::mul: return " * ";
    case op::div: return " / ";
    case op::mod: return " % ";
    case op::band: return " & ";
    case op::bor: return " | ";
    case op::bxor: return " ^ ";
    case op::lt: return " < ";
    case op::le: return " <= ";
    case op::gt: return " > ";
    case op::ge: return " >= ";
    case op::eq: return " == ";
    case op::ne: return " != ";
    case op::land: return " && ";
    case op::lor: return " || ";
    case op::shl: return " << ";
    case op::shr: return " >> ";
    case op::neg: return "-";
    case op::bnot: return "~";
    default: throw std::logic_error("kiln::codegen: op has no operator spelling");
  }
}

bool is_helper(op o) {
  return o == op::abs || o == op::min || o == op::max || o == op::clamp || o == op::philox_lo ||
         o == op::philox_hi;
}

// Philox4x32-10 (Random123's philox4x32_10) of counter words (c lo, c hi, 0, 0) and key words
// (k lo, k hi), returning two of its four output words. 32x32->64 products in uint64_t are
// exact in every dialect, so every backend gives the same bits.
std::string philox_def(const std::string& name, bool high) {
  return cat(
      "KILN_FUNC uint64_t ", name,
      "(uint64_t c, uint64_t k) {\n"
      "  uint32_t c0 = (uint32_t)c, c1 = (uint32_t)(c >> 32), c2 = 0, c3 = 0;\n"
      "  uint32_t k0 = (uint32_t)k, k1 = (uint32_t)(k >> 32);\n"
      "  for (int r = 0; r < 10; ++r) {\n"
      "    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }\n"
      "    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;\n"
      "    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;\n"
      "    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;\n"
      "    c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;\n"
      "  }\n",
      high ? "  return (uint64_t)c2 | (uint64_t)c3 << 32;\n}\n"
           : "  return (uint64_t)c0 | (uint64_t)c1 << 32;\n}\n");
}

std::string leaf(const ir::node& n) {
  switch (n.o) {
    case op::component: return value_name(n.slot);
    case op::index: return "((int64_t)kq_i)";
    case op::capture: return load_value(n.dtype, capture_name(n.slot));
    case op::combine_a: return "kq_a";
    case op::combine_b: return "kq_b";
    case op::load: return load_name(n.slot);
    default: throw std::logic_error("kiln::codegen: not a leaf");
  }
}

}  // namespace

std::string value_type(scalar_type t) { return is_reduced_float(t) ? "float" : type_name(t); }

std::string load_value(scalar_type t, const std::string& elem) {
  return is_reduced_float(t) ? cat("kiln_", type_name(t), "_to_float(", elem, ")") : elem;
}

std::string store_value(scalar_type t, const std::string& v) {
  return is_reduced_float(t) ? cat("kiln_float_to_", type_name(t), "(", v, ")") : v;
}

std::string value_name(int var) { return cat("v", std::to_string(var)); }
std::string capture_name(int slot) { return cat("kq_c", std::to_string(slot)); }

std::string load_name(int slot) { return cat("kl", std::to_string(slot)); }

std::string render_expr(const ir::graph& g, ir::node_id root) {
  return render_node(g, root, [&](ir::node_id x) { return render_expr(g, x); });
}

std::string render_node(const ir::graph& g, ir::node_id id,
                        const std::function<std::string(ir::node_id)>& operand) {
  const ir::node& n = g[id];
  const auto sub = [&](int k) { return operand(n.operands[k]); };
  const std::string t = value_type(n.dtype);
  switch (ir::info(n.o).cls) {
    case op_class::leaf: return leaf(n);
    case op_class::arithmetic:
    case op_class::compare: return cat("(", sub(0), spelling(n.o), sub(1), ")");
    case op_class::logical: return cat("((bool)", sub(0), spelling(n.o), "(bool)", sub(1), ")");
    case op_class::shift: return cat("(", sub(0), spelling(n.o), "(", sub(1), "))");
    case op_class::unary:
      if (n.o == op::lnot) return cat("(!(bool)", sub(0), ")");
      return cat("((", t, ")(", spelling(n.o), sub(0), "))");
    case op_class::select: return cat("((bool)", sub(0), " ? ", sub(1), " : ", sub(2), ")");
    case op_class::cast:  // to f16/bf16: the value rounded to the type, kept in float
      if (is_reduced_float(n.dtype))
        return cat("kiln_round_", type_name(n.dtype), "((float)(", sub(0), "))");
      return cat("((", t, ")(", sub(0), "))");
    case op_class::math: {
      std::string s = is_helper(n.o) ? helper_name({n.o, n.dtype}) : ir::info(n.o).name;
      s.append("(");
      for (int k = 0; k < ir::info(n.o).arity; ++k) s.append(k ? ", " : "").append(sub(k));
      return s.append(")");
    }
    case op_class::reduce: break;  // a kernel's structure, not an expression: see tensor/
  }
  throw std::logic_error("kiln::codegen: op " + std::string(ir::info(n.o).name) +
                         " is not an expression");
}

std::string helper_name(const helper& h) {
  return cat("kq_", ir::info(h.o).name, "_", type_name(h.t));
}

std::string helper_def(const helper& h) {
  const std::string t = value_type(h.t), name = helper_name(h);
  const bool is_float = h.t == scalar_type::f32 || h.t == scalar_type::f64 || is_reduced_float(h.t);
  const std::string s = cat("KILN_FUNC ", t, " ", name);
  switch (h.o) {
    case op::abs:
      return cat(s, "(", t, " x) { return ",
                 is_float ? std::string("fabs(x)") : cat("x < (", t, ")0 ? (", t, ")(-x) : x"),
                 "; }\n");
    case op::min: return cat(s, "(", t, " a, ", t, " b) { return b < a ? b : a; }\n");
    case op::max: return cat(s, "(", t, " a, ", t, " b) { return a < b ? b : a; }\n");
    case op::clamp:
      return cat(s, "(", t, " v, ", t, " lo, ", t,
                 " hi) { return v < lo ? lo : hi < v ? hi : v; }\n");
    case op::philox_lo:
    case op::philox_hi: return philox_def(name, h.o == op::philox_hi);
    default: throw std::logic_error(cat("kiln::codegen: no helper for ", name));
  }
}

std::vector<helper> helpers_in(const ir::graph& g) {
  std::vector<helper> out;
  for (const ir::node& n : g.nodes) {
    const helper h{n.o, n.dtype};
    if (is_helper(n.o) && std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

namespace {
// Pre-order, select's operands last to first: the order in which the string renderer this
// replaced (its operands evaluated right to left by GCC) named helpers, so kernels keep their
// text.
void collect(const ir::graph& g, ir::node_id id, std::vector<helper>& out) {
  const ir::node& n = g[id];
  if (is_helper(n.o)) {
    const helper h{n.o, n.dtype};
    bool seen = false;
    for (const helper& x : out) seen |= x == h;
    if (!seen) out.push_back(h);
  }
  const int arity = ir::info(n.o).arity;
  for (int k = 0; k < arity; ++k)
    collect(g, n.operands[n.o == op::select ? arity - 1 - k : k], out);
}
}  // namespace

std::vector<helper> helpers_of(const ir::graph& g, const std::vector<ir::node_id>& roots) {
  std::vector<helper> out;
  for (ir::node_id r : roots) collect(g, r, out);
  return out;
}

}  // namespace kiln::codegen
