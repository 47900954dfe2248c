// Rendering a lowered reduction (reduce_kernel.hpp) into the portable kernel language.
#include <string_view>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "ir/layout.hpp"
#include "tensor/index_code.hpp"
#include "tensor/reduce_kernel.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

constexpr const char* no_index = "(int64_t)0x7fffffffffffffff";

bool is_arg(ir::op o) { return o == ir::op::argmax || o == ir::op::argmin; }

struct renderer {
  const reduce_lowered& l;
  const reduce_plan& p;
  const ir::graph& g = l.g;
  const ir::node& R = g[l.red];
  const bool arg = is_arg(R.o), split = p.chunks > 1;
  const bool group = p.strategy == reduce_strategy::group;
  const std::size_t K = l.kept.size(), M = l.reduced.size();
  const std::string A = codegen::value_type(g[R.operands[0]].dtype);  // f16, bf16: float

  std::string name(ir::node_id x) const {
    if (x == l.red) return arg ? "kt_acci" : "kt_acc";
    return ir::info(g[x].o).cls == ir::op_class::leaf ? codegen::render_expr(g, x)
                                                      : cat("kt_n", num(std::size_t(x)));
  }

  // The fold of two accumulators: NaN wins max and min (as in PyTorch); argmax/argmin take
  // the lower index among equals, and the first NaN.
  std::string fold_helpers() const {
    const char* cmp = R.o == ir::op::reduce_min || R.o == ir::op::argmin ? " < " : " > ";
    if (arg)
      return cat("KILN_FUNC bool kt_take(", A, " av, int64_t ai, ", A, " bv, int64_t bi) {\n",
                 "  return bv", cmp, "av || (bv == av && bi < ai) || (bv != bv && (av == av || bi ",
                 "< ai));\n}\n");
    if (R.o == ir::op::reduce_sum)
      return cat("KILN_FUNC ", A, " kt_fold(", A, " a, ", A, " b) { return a + b; }\n");
    return cat("KILN_FUNC ", A, " kt_fold(", A, " a, ", A, " b) { return (a != a || a", cmp,
               "b) ? a : b; }\n");
  }

  std::string params() const {
    std::string s = cat("KILN_GLOBAL ", type_name(g[g.roots[0]].dtype), "* KILN_RESTRICT kt_out");
    if (split) s += cat(", KILN_GLOBAL ", A, "* kt_pv", arg ? ", KILN_GLOBAL int64_t* kt_pi" : "");
    for (std::size_t k = 0; k < g.inputs.size(); ++k)
      s +=
          cat(", KILN_GLOBAL const ", type_name(g.inputs[k].type), "* KILN_RESTRICT kt_in", num(k));
    for (std::size_t c = 0; c < g.captures.size(); ++c)
      s += cat(", ", type_name(g.captures[c].type), " ", codegen::capture_name(int(c)));
    s += cat(", ", A, " kt_init");
    for (std::size_t d = 1; d < K; ++d) s += cat(", int64_t kt_k", num(d));
    for (std::size_t j = 1; j < M; ++j) s += cat(", int64_t kt_m", num(j));
    s += ", int64_t kt_rn";
    if (split) s += ", int64_t kt_cl, int64_t kt_nc, int64_t kt_on";
    if (group) s += ", int64_t kt_nw";
    s += stride_params(g, K + M);
    return s;
  }

  std::string nodes(bool epilogue, const char* indent) const {
    std::string s;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const auto id = static_cast<ir::node_id>(i);
      const ir::op_class c = ir::info(g[id].o).cls;
      if (c == ir::op_class::leaf || c == ir::op_class::reduce) continue;
      if (bool(l.in_epilogue[i]) != epilogue) continue;
      s += cat(indent, "const ", codegen::value_type(g[id].dtype), " ", name(id), " = ",
               codegen::render_node(g, id, [&](ir::node_id x) { return name(x); }), ";\n");
    }
    return s;
  }

  std::string loads(bool epilogue, const char* indent) const {
    std::string s;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::node& n = g.nodes[i];
      if (n.o != ir::op::load || bool(l.in_epilogue[i]) != epilogue) continue;
      const auto k = static_cast<std::size_t>(n.slot);
      std::string at = cat("kt_b", num(k));
      if (!epilogue)
        if (const std::string r = input_offset(g, k, K, K + M, "kt_y"); !r.empty())
          at += cat(" + ", r);
      s += cat(indent, "const ", codegen::value_type(g.inputs[k].type), " ",
               codegen::load_name(n.slot), " = ",
               codegen::load_value(g.inputs[k].type, cat("kt_in", num(k), "[", at, "]")), ";\n");
    }
    return s;
  }

  // One folded element: reduced coordinates of row kt_r, the prologue, the fold into
  // accumulator u.
  std::string element(const std::string& u) const {
    std::string s;
    s += row_coords(M);
    s += loads(false, "    ") + nodes(false, "    ");
    const std::string v = name(R.operands[0]);
    if (arg) {
      // An accumulator sees its rows in increasing order, so kt_take reduces to: a greater
      // value, the first NaN, or the first row; selects rather than a branch.
      const std::string a = cat("kt_acc", u), ai = cat("kt_acci", u);
      const char* cmp = R.o == ir::op::argmin ? " < " : " > ";
      return s += cat("    const bool kt_tk", u, " = ", v, cmp, a, " || (", v, " != ", v, " && ", a,
                      " == ", a, ") || ", ai, " == ", no_index, ";\n    ", a, " = kt_tk", u, " ? ",
                      v, " : ", a, ";\n    ", ai, " = kt_tk", u, " ? kt_r : ", ai, ";\n");
    }
    return s += cat("    kt_acc", u, " = kt_fold(kt_acc", u, ", ", v, ");\n");
  }

  // The fold over rows [kt_r0, kt_r1) (every kt_st-th from kt_rb): `unroll` independent
  // accumulators, so loads overlap and adds do not wait on each other, merged in a fixed order.
  std::string fold_rows() const {
    constexpr int unroll = 4;
    std::string s;
    for (int u = 0; u < unroll; ++u) {
      s += cat("  ", A, " kt_acc", num(u), " = kt_init;\n");
      if (arg) s += cat("  int64_t kt_acci", num(u), " = ", no_index, ";\n");
    }
    s += group ? cat("  const int64_t kt_st = ", lanes(), ";\n  int64_t kt_rb = kt_r0 + kt_lane;\n")
               : "  const int64_t kt_st = 1;\n  int64_t kt_rb = kt_r0;\n";
    s += cat("  for (; kt_rb + ", num(unroll - 1), " * kt_st < kt_r1; kt_rb += ", num(unroll),
             " * kt_st) {\n");
    for (int u = 0; u < unroll; ++u)
      s += cat("  {\n    const int64_t kt_r = kt_rb + ", num(u), " * kt_st;\n", element(num(u)),
               "  }\n");
    s += cat("  }\n  for (; kt_rb < kt_r1; kt_rb += kt_st) {\n    const int64_t kt_r = kt_rb;\n",
             element("0"), "  }\n");
    if (!arg)
      return s + cat("  ", A, " kt_acc = kt_fold(kt_fold(kt_acc0, kt_acc1), kt_fold(kt_acc2, ",
                     "kt_acc3));\n");
    s += cat("  ", A, " kt_acc = kt_acc0;\n  int64_t kt_acci = kt_acci0;\n");
    for (int u = 1; u < unroll; ++u)
      s += cat("  if (kt_take(kt_acc, kt_acci, kt_acc", num(u), ", kt_acci", num(u),
               ")) { kt_acc = kt_acc", num(u), "; kt_acci = kt_acci", num(u), "; }\n");
    return s;
  }

  std::string accumulators() const {
    return cat("  ", A, " kt_acc = kt_init;\n",
               arg ? cat("  int64_t kt_acci = ", no_index, ";\n") : std::string());
  }

  // The epilogue and the store (no split), or the partial's store (split).
  std::string finish(const char* indent) const {
    if (split)
      return cat(indent, "kt_pv[kt_c * kt_on + kt_oi] = kt_acc;\n",
                 arg ? cat(indent, "kt_pi[kt_c * kt_on + kt_oi] = kt_acci;\n") : std::string());
    return loads(true, indent) + nodes(true, indent) +
           cat(indent, "kt_out[kt_oi] = ", out_value(), ";\n");
  }

  std::string lanes() const { return num(p.lanes); }
  std::string out_value() const {
    return codegen::store_value(g[g.roots[0]].dtype, name(g.roots[0]));
  }

  // Group strategy: G / lanes outputs per group, `lanes` items each; kt_w is this item's work
  // (an output, or an output's chunk), kt_live whether it has one (the last group's tail
  // has none, and still takes part in the barriers).
  std::string group_prologue(const char* works, std::uint32_t lanes) const {
    const std::string G = num(reduce_policy::group), L = num(lanes);
    return cat("  KILN_LOCAL ", A, " kt_sh[", G, "];\n",
               arg ? cat("  KILN_LOCAL int64_t kt_shi[", G, "];\n") : std::string(),
               "  const uint32_t kt_t = (uint32_t)kiln_local_id(0);\n",
               "  const uint32_t kt_lane = kt_t % ", L, "u;\n",
               "  const int64_t kt_w = (int64_t)kiln_group_id(0) * ",
               num(reduce_policy::group / lanes), " + kt_t / ", L, ";\n",
               "  const bool kt_live = kt_w < ", works, ";\n");
  }

  // Folds the lanes' accumulators of one work in local memory, then `done` in its lane 0.
  std::string tree(const std::string& done, std::uint32_t lanes) const {
    std::string s = cat("  kt_sh[kt_t] = kt_acc;\n", arg ? "  kt_shi[kt_t] = kt_acci;\n" : "",
                        "  kiln_barrier();\n  for (uint32_t kt_h = ", num(lanes),
                        " / 2; kt_h > 0; kt_h >>= 1) {\n    if (kt_lane < kt_h) {\n");
    s += arg ? "      if (kt_take(kt_sh[kt_t], kt_shi[kt_t], kt_sh[kt_t + kt_h], "
               "kt_shi[kt_t + kt_h])) {\n"
               "        kt_sh[kt_t] = kt_sh[kt_t + kt_h]; kt_shi[kt_t] = kt_shi[kt_t + kt_h];\n"
               "      }\n"
             : "      kt_sh[kt_t] = kt_fold(kt_sh[kt_t], kt_sh[kt_t + kt_h]);\n";
    s += "    }\n    kiln_barrier();\n  }\n  if (kt_lane == 0 && kt_live) {\n"
         "    kt_acc = kt_sh[kt_t];\n";
    if (arg) s += "    kt_acci = kt_shi[kt_t];\n";
    return s + done + "  }\n";
  }

  std::string main_kernel() const {
    std::string s =
        cat("KILN_KERNEL void ", split ? "kt_part" : "kt_reduce", "(", params(), ") {\n");
    s += group ? group_prologue("kt_nw", p.lanes)
               : "  const int64_t kt_w = (int64_t)kiln_global_id(0);\n";
    // A lanes fold puts a barrier in the program: whole groups, the tail idle.
    if (split && !group && p.fold_lanes > 1) s += "  if (kt_w >= kt_nc * kt_on) return;\n";
    const char* live = group ? "kt_live ? " : "";
    const char* dead = group ? " : kt_r0" : "";
    s += split ? cat("  const int64_t kt_oi = kt_w % kt_on, kt_c = kt_w / kt_on;\n"
                     "  const int64_t kt_r0 = kt_c * kt_cl;\n"
                     "  const int64_t kt_r1 = ",
                     live, "(kt_r0 + kt_cl < kt_rn ? kt_r0 + kt_cl : kt_rn)", dead, ";\n")
               : cat("  const int64_t kt_oi = kt_w, kt_r0 = 0, kt_r1 = ", live, "kt_rn",
                     group ? " : 0" : "", ";\n");
    s += output_position(g, K) + fold_rows();
    if (!group) return s + finish("  ") + "}\n";
    return s + tree(finish("    "), p.lanes) + "}\n";
  }

  // Split: the partials of each output folded in chunk order (by p.fold_lanes lanes, then their
  // tree, when there are several), then the epilogue.
  std::string fold_kernel() const {
    const std::uint32_t fl = p.fold_lanes;
    const bool lanes_fold = fl > 1;
    std::string s = cat("KILN_KERNEL void kt_fold_parts(", params(), ") {\n");
    s += lanes_fold ? group_prologue("kt_on", fl) + "  const int64_t kt_oi = kt_w;\n"
                    : "  const int64_t kt_oi = (int64_t)kiln_global_id(0);\n";
    s += output_position(g, K) + accumulators();
    s += cat("  for (int64_t kt_c = ", lanes_fold ? "kt_live ? kt_lane : kt_nc" : "0",
             "; kt_c < kt_nc; kt_c += ", lanes_fold ? num(fl) : "1", ") {\n", "    const ", A,
             " kt_v = kt_pv[kt_c * kt_on + kt_oi];\n");
    s +=
        arg ? "    const int64_t kt_vi = kt_pi[kt_c * kt_on + kt_oi];\n"
              "    if (kt_take(kt_acc, kt_acci, kt_v, kt_vi)) { kt_acc = kt_v; kt_acci = kt_vi; }\n"
            : "    kt_acc = kt_fold(kt_acc, kt_v);\n";
    s += "  }\n";
    const std::string done =
        loads(true, "    ") + nodes(true, "    ") + cat("    kt_out[kt_oi] = ", out_value(), ";\n");
    if (lanes_fold) return s + tree(done, fl) + "}\n";
    return s + loads(true, "  ") + nodes(true, "  ") +
           cat("  kt_out[kt_oi] = ", out_value(), ";\n}\n");
  }
};

}  // namespace

std::string render_reduce(const reduce_lowered& l, const reduce_plan& p) {
  const renderer r{l, p};
  std::string s;
  for (const codegen::helper& h : codegen::helpers_in(l.g)) s += codegen::helper_def(h);
  s += r.fold_helpers() + r.main_kernel();
  if (p.chunks > 1) s += r.fold_kernel();
  return s;
}

}  // namespace kiln::detail
