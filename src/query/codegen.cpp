// The backend-independent half of query code generation: helper functions, the element
// function carrying the fused chain, and the accumulator/scan value types with their combines.
#include "query/codegen.hpp"

#include <stdexcept>

#include "codegen/expr_render.hpp"
#include "ir/walk.hpp"
#include "kiln/error.hpp"

namespace kiln::detail::q {

using codegen::capture_name;
using codegen::helper;
using codegen::render_expr;
using codegen::value_name;

const char* c_type(scalar_type t) {
  if (is_reduced_float(t))
    throw unsupported(std::string("kiln::query: ") + type_name(t) +
                      " elements are not supported yet; convert them to float first");
  return type_name(t);
}

namespace {

std::string stage_line(const ir::graph& g, const stage& s) {
  switch (s.kind) {
    case stage_kind::map:
    case stage_kind::enumerate:
      return "  const " + std::string(c_type(s.type)) + " " + value_name(s.var) + " = " +
             render_expr(g, s.expr) + ";\n";
    case stage_kind::filter: return "  if (!(" + render_expr(g, s.expr) + ")) return false;\n";
    default: throw std::logic_error("kiln::query: stage cannot be rendered in an element function");
  }
}

// The reduce accumulator: value, count, index (reduce_result's layout).
std::string reduce_code(const ir::graph& g, const reduce_spec& r, scalar_type elem,
                        bool has_value) {
  const std::string A = c_type(r.acc), T = c_type(elem);
  std::string s = "typedef struct { " + A + " v; uint64_t n; int64_t i; } kq_acc;\n";
  std::string ident = "0";
  if (r.kind == reduce_kind::product) ident = "1";
  if (r.kind == reduce_kind::all) ident = "1";
  s += "KILN_FUNC kq_acc kq_acc_id() { kq_acc a; a.v = (" + A + ")" + ident +
       "; a.n = 0; a.i = -1; return a; }\n";
  s += "KILN_FUNC kq_acc kq_lift(" + (has_value ? T + " x, " : std::string()) +
       "uint64_t i) { kq_acc a; a.v = (" + A + ")" + (has_value ? "x" : "0") +
       "; a.n = 1; a.i = (int64_t)i; return a; }\n";
  if (r.kind == reduce_kind::custom)
    s += "KILN_FUNC " + A + " kq_rop(" + A + " kq_a, " + A + " kq_b) { return " +
         render_expr(g, r.op) + "; }\n";
  s += "KILN_FUNC kq_acc kq_acc_op(kq_acc a, kq_acc b) {\n  kq_acc r = a;\n  r.n = a.n + b.n;\n";
  switch (r.kind) {
    case reduce_kind::count: break;
    case reduce_kind::sum:
    case reduce_kind::average: s += "  r.v = a.v + b.v;\n"; break;
    case reduce_kind::product: s += "  r.v = a.v * b.v;\n"; break;
    case reduce_kind::any: s += "  r.v = a.v || b.v;\n"; break;
    case reduce_kind::all: s += "  r.v = a.v && b.v;\n"; break;
    case reduce_kind::min:
    case reduce_kind::max:
    case reduce_kind::custom: {
      s += "  if (!b.n) return a;\n  if (!a.n) return b;\n";
      if (r.kind == reduce_kind::min) s += "  r.v = b.v < a.v ? b.v : a.v;\n";
      if (r.kind == reduce_kind::max) s += "  r.v = a.v < b.v ? b.v : a.v;\n";
      if (r.kind == reduce_kind::custom) s += "  r.v = kq_rop(a.v, b.v);\n";
      break;
    }
    case reduce_kind::argmin:
    case reduce_kind::argmax: {
      // Order-independent: the smaller index wins ties, so any grouping gives the first one.
      const char* better = r.kind == reduce_kind::argmin ? "b.v < a.v" : "a.v < b.v";
      const char* worse = r.kind == reduce_kind::argmin ? "a.v < b.v" : "b.v < a.v";
      s += "  if (!b.n) return a;\n  if (!a.n) return b;\n  if (" + std::string(better) +
           " || (!(" + worse + ") && b.i < a.i)) { r.v = b.v; r.i = b.i; }\n";
      break;
    }
  }
  return s + "  return r;\n}\n";
}

// Scan values carry a has-value flag, so no identity of the user's operation is needed.
std::string scan_code(const ir::graph& g, const stage& sc) {
  const std::string A = c_type(sc.type);
  return "KILN_FUNC " + A + " kq_sop(" + A + " kq_a, " + A + " kq_b) { return " +
         render_expr(g, sc.expr) +
         "; }\n"
         "typedef struct { " +
         A +
         " v; uint32_t h; } kq_lb_t;\n"
         "KILN_FUNC kq_lb_t kq_lb_id() { kq_lb_t r; r.v = (" +
         A +
         ")0; r.h = 0; return r; }\n"
         "KILN_FUNC kq_lb_t kq_slift(" +
         A +
         " x) { kq_lb_t r; r.v = x; r.h = 1; return r; }\n"
         "KILN_FUNC kq_lb_t kq_lb_op(kq_lb_t a, kq_lb_t b) {\n"
         "  if (!b.h) return a;\n  if (!a.h) return b;\n"
         "  kq_lb_t r; r.v = kq_sop(a.v, b.v); r.h = 1; return r;\n}\n"
         "KILN_FUNC kq_lb_t kq_lb_load(KILN_GLOBAL volatile kq_lb_t* p) {\n"
         "  kq_lb_t r; r.v = p->v; r.h = p->h; return r;\n}\n";
}

// True when every stage after the first filter is safe to run on a dropped element.
bool speculate(const ir::graph& g, const segment& seg) {
  const auto divides = [](const ir::node& n) { return n.o == ir::op::div || n.o == ir::op::mod; };
  bool after_filter = false;
  for (const stage& s : seg.stages) {
    if (after_filter && s.expr >= 0 && ir::any_of(g, s.expr, divides)) return false;
    after_filter |= s.kind == stage_kind::filter;
  }
  return true;
}

}  // namespace

std::string out_params(const segment& seg) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += "KILN_GLOBAL " + std::string(c_type(seg.out_types[k])) + "* KILN_RESTRICT kq_out" +
         std::to_string(k) + ", ";
  return s;
}

std::string out_stores(const segment& seg, const char* pos, const char* idx) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k) {
    const std::string o = cat("o", std::to_string(k));
    s += cat("kq_out", std::to_string(k), "[", pos, "] = ", idx ? cat(o, "[", idx, "]") : o, "; ");
  }
  return s;
}

common_code render_common(const codegen_in& in) {
  const segment& seg = in.seg;
  const ir::graph& g = in.graph;
  common_code c;
  for (const helper& h : codegen::helpers_of(g, g.roots)) c.text += codegen::helper_def(h);

  // Parameters shared by every kernel: inputs, then every capture of the query.
  std::string params, args;
  for (std::size_t k = 0; k < seg.inputs.size(); ++k) {
    params += std::string(k ? ", " : "") + "KILN_GLOBAL const " + c_type(seg.inputs[k].type) +
              "* KILN_RESTRICT kq_in" + std::to_string(k);
    args += std::string(k ? ", " : "") + "kq_in" + std::to_string(k);
  }
  for (std::size_t k = 0; k < g.captures.size(); ++k) {
    const std::string name = capture_name(static_cast<int>(k));
    params += std::string(params.empty() ? "" : ", ") + c_type(g.captures[k].type) + " " + name;
    args += std::string(args.empty() ? "" : ", ") + name;
  }
  c.params = params;
  c.args = args;
  c.lead = params.empty() ? "" : cat(params, ", ");
  c.call_args = args.empty() ? "" : cat(", ", args);

  std::string loads;
  for (std::size_t k = 0; k < seg.inputs.size(); ++k)
    loads += "  const " + std::string(c_type(seg.inputs[k].type)) + " " +
             value_name(seg.inputs[k].var) + " = kq_in" + std::to_string(k) + "[kq_i];\n";

  // Outputs of the element function.
  std::vector<int> out_vars = seg.out_vars;
  std::vector<scalar_type> out_types = seg.out_types;
  if (seg.end == segment_end::reduce) {
    if (in.reduce->kind == reduce_kind::count) {
      out_vars.clear();
      out_types.clear();
    } else {
      out_vars.resize(1);
      out_types.resize(1);
    }
  }
  std::string out_params;
  for (std::size_t k = 0; k < out_vars.size(); ++k) {
    out_params += ", " + std::string(c_type(out_types[k])) + "* kq_o" + std::to_string(k);
    c.out_decls += std::string(c_type(out_types[k])) + " o" + std::to_string(k) + "; ";
    c.out_refs += std::string(k ? ", " : "") + "&o" + std::to_string(k);
  }
  std::string stores;
  for (std::size_t k = 0; k < out_vars.size(); ++k)
    stores += "  *kq_o" + std::to_string(k) + " = " + value_name(out_vars[k]) + ";\n";
  const std::string sep = params.empty() ? "" : ", ";

  const int si = seg.scan_index();
  if (si < 0) {
    c.text += "KILN_FUNC bool kq_elem(uint64_t kq_i" + sep + params + out_params + ") {\n" + loads;
    if (speculate(g, seg)) {
      // Branch-free: every stage runs for every element and the filters only clear the flag,
      // so loops over elements vectorise and never mispredict. Done only when nothing after
      // the first filter divides (an integer division by zero would trap on a dropped
      // element); other values computed for dropped elements are discarded.
      c.text += "  bool kq_keep = true;\n";
      for (const stage& s : seg.stages)
        c.text += s.kind == stage_kind::filter
                      ? "  kq_keep = kq_keep & (bool)(" + render_expr(g, s.expr) + ");\n"
                      : stage_line(g, s);
      c.text += stores + "  return kq_keep;\n}\n";
    } else {
      for (const stage& s : seg.stages) c.text += stage_line(g, s);
      c.text += stores + "  return true;\n}\n";
    }
  } else {
    const stage& sc = seg.stages[si];
    const std::string A = c_type(sc.type);
    c.text += scan_code(g, sc);
    // Before the scan: the value to scan. After: the stages that use the running value.
    c.text += "KILN_FUNC " + A + " kq_pre(uint64_t kq_i" + sep + params + ") {\n" + loads;
    for (int k = 0; k < si; ++k) c.text += stage_line(g, seg.stages[k]);
    c.text += "  return (" + A + ")" + value_name(sc.arg) + ";\n}\n";
    c.text += "KILN_FUNC void kq_post(uint64_t kq_i" + sep + params + ", " + A + " " +
              value_name(sc.var) + out_params + ") {\n";
    for (std::size_t k = si + 1; k < seg.stages.size(); ++k) c.text += stage_line(g, seg.stages[k]);
    c.text += stores + "}\n";
  }
  if (seg.end == segment_end::reduce) {
    const bool has_value = !out_types.empty();
    c.text += reduce_code(g, *in.reduce, has_value ? out_types[0] : scalar_type::u8, has_value);
  }
  return c;
}

}  // namespace kiln::detail::q
