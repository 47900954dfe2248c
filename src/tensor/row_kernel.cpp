// Row fusion (row_kernel.hpp): when it applies, lowering, rendering and launching.
#include "tensor/row_kernel.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "codegen/expr_render.hpp"
#include "codegen/half_words.hpp"
#include "codegen/target.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "ir/layout.hpp"
#include "ir/print.hpp"
#include "kiln/error.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/log.hpp"
#include "runtime/runtime.hpp"
#include "tensor/index_code.hpp"
#include "tensor/kernel_args.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

bool is_reduction(const tensor_impl& t) {
  return t.kind == tensor_kind::op && ir::info(t.o).cls == ir::op_class::reduce;
}

void all_reductions(const tensor_impl& t, std::vector<const tensor_impl*>& out,
                    std::unordered_set<const tensor_impl*>& seen) {
  if (t.kind != tensor_kind::op || !seen.insert(&t).second) return;
  if (is_reduction(t)) out.push_back(&t);
  for (const auto& a : t.args) all_reductions(*a, out, seen);
}

struct row_lowering {
  row_lowered& out;
  const shape_t& shape;
  std::vector<shape_t> strides;
  std::unordered_map<const tensor_impl*, ir::node_id> seen;

  ir::node_id visit(const tensor_impl& t) {
    if (auto it = seen.find(&t); it != seen.end()) return it->second;
    ir::graph& g = out.l.g;
    ir::node_id id = -1;
    if (t.kind == tensor_kind::stored) {
      const auto slot = static_cast<std::int32_t>(g.inputs.size());
      g.inputs.push_back({t.dtype, {}});
      out.l.leaves.push_back(&t);
      strides.push_back(strides_over(t, shape));
      id = g.add(ir::op::load, t.dtype, {}, slot);
    } else if (t.kind == tensor_kind::scalar) {
      g.captures.push_back(t.value);
      id = g.add(ir::op::capture, t.dtype, {}, static_cast<std::int32_t>(g.captures.size() - 1));
    } else {
      ir::node n{t.o, t.dtype, {-1, -1, -1}, static_cast<std::int32_t>(t.axes)};
      for (std::size_t k = 0; k < t.args.size(); ++k) n.operands[k] = visit(*t.args[k]);
      if (!is_reduction(t)) n.slot = 0;
      id = g.add(n);
      if (is_reduction(t)) out.reds.push_back(id);
    }
    seen.emplace(&t, id);
    return id;
  }
};

// How the warp form reads input k along a row of the reduced dims [K, K + M): contiguous (a
// pointer at constant offsets), the same for the whole row (read once), or otherwise (then the
// warp form does not apply: rows keep the group form).
enum class along { contiguous, row_constant, other };
along along_row(const ir::graph& g, std::size_t k, std::size_t K, std::size_t M) {
  const ir::layout& L = g.inputs[k].l;
  bool constant = true;
  for (std::size_t d = K; d < K + M; ++d)
    constant = constant && ir::classify(L.dims[d], L.strides[d]) == ir::stride_class::zero;
  if (constant) return along::row_constant;
  return M == 1 && ir::classify(L.dims[K], L.strides[K]) == ir::stride_class::one
             ? along::contiguous
             : along::other;
}

// The nodes root reads, as a mark per node: the walk goes through operands and stops at
// reductions (row values by then) and wherever `stop` says (values kept in registers).
template <class Stop>
std::vector<bool> reached(const ir::graph& g, ir::node_id root, Stop stop) {
  std::vector<bool> in(g.nodes.size());
  std::vector<ir::node_id> stack{root};
  while (!stack.empty()) {
    const ir::node_id y = stack.back();
    stack.pop_back();
    if (in[std::size_t(y)]) continue;
    in[std::size_t(y)] = true;
    if (ir::info(g[y].o).cls == ir::op_class::reduce || stop(y)) continue;
    for (int k = 0; k < ir::info(g[y].o).arity; ++k) stack.push_back(g[y].operands[k]);
  }
  return in;
}

bool reads(const ir::graph& g, ir::node_id root, ir::node_id x) {
  return reached(g, root, [](ir::node_id) { return false; })[std::size_t(x)];
}

// Per reduction: whether the value it folds (not a leaf or a load: those are in registers
// already) is read again by a later pass or by the output.
std::vector<bool> kept_values(const row_lowered& r) {
  const ir::graph& g = r.l.g;
  std::vector<bool> keep(r.reds.size());
  for (std::size_t j = 0; j < r.reds.size(); ++j) {
    const ir::node_id o = g[r.reds[j]].operands[0];
    if (ir::info(g[o].o).cls == ir::op_class::leaf || g[o].o == ir::op::load) continue;
    bool later = reads(g, g.roots.at(0), o);
    for (std::size_t k = j + 1; k < r.reds.size() && !later; ++k)
      later = reads(g, g[r.reds[k]].operands[0], o);
    keep[j] = later;
  }
  return keep;
}

struct renderer {
  const row_lowered& r;
  std::uint32_t lanes;
  std::uint32_t items;  // > 0: the warp form, `items` elements per lane in registers
  bool full;            // warp form: rows of exactly 32 * items elements (no bounds checks)
  const char* warp_definitions;
  // warp form, full rows, items % 8 == 0: a lane's elements are 8 consecutive ones per 256
  // (element e at 8 lane + 256 (e / 8) + e % 8), 16-bit arrays moved as 16-byte words
  bool words = false;
  const ir::graph& g = r.l.g;
  const std::size_t K = r.l.kept.size(), M = r.l.reduced.size();
  const bool warp = items > 0;
  const bool group = lanes > 1 && !warp;
  // Warp form: which passes keep their folded value in registers (kt_V<j>), for later passes
  // or the output to read instead of computing it again (softmax's exp(x - max)).
  const std::vector<bool> keep = warp ? kept_values(r) : std::vector<bool>{};

  std::size_t red_index(ir::node_id x) const {
    return std::size_t(std::find(r.reds.begin(), r.reds.end(), x) - r.reds.begin());
  }
  bool is_red(ir::node_id x) const { return ir::info(g[x].o).cls == ir::op_class::reduce; }
  std::string acc_type(std::size_t j) const { return codegen::value_type(g[r.reds[j]].dtype); }
  std::string name(ir::node_id x) const {
    // In a group, read from local memory where used: a private copy would live across the
    // later passes' barriers, which PoCL's work-group loops mishandle (it crashed).
    if (is_red(x))
      return cat(group ? "kt_sh" : "kt_red", num(red_index(x)), group ? "[kt_t - kt_lane]" : "");
    return ir::info(g[x].o).cls == ir::op_class::leaf ? codegen::render_expr(g, x)
                                                      : cat("kt_n", num(std::size_t(x)));
  }
  // The nodes `root` needs, in node order, stopping at reductions (row values by then) and,
  // in the warp form, at values kept in registers by passes before `upto`.
  std::vector<ir::node_id> needed(ir::node_id root, std::size_t upto = 0) const {
    const std::vector<bool> in =
        reached(g, root, [&](ir::node_id x) { return kept_by(x, upto) >= 0; });
    std::vector<ir::node_id> out;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i] && !is_red(ir::node_id(i))) out.push_back(ir::node_id(i));
    return out;
  }

  // Warp form: the pass (< upto) whose folded value x is, kept in registers kt_V<pass>; -1.
  int kept_by(ir::node_id x, std::size_t upto) const {
    for (std::size_t j = 0; j < upto && j < keep.size(); ++j)
      if (keep[j] && g[r.reds[j]].operands[0] == x) return int(j);
    return -1;
  }

  // Input k's value at row element kt_r (its coordinates kt_y<j> computed).
  std::string load(std::size_t k) const {
    std::string at = cat("kt_b", num(k));
    if (const std::string o = input_offset(g, k, K, K + M, "kt_y"); !o.empty()) at += cat(" + ", o);
    return codegen::load_value(g.inputs[k].type, cat("kt_in", num(k), "[", at, "]"));
  }

  // Row element kt_r: its coordinates, then the loads and nodes `root` needs. The warp form
  // reads the loads, and the values passes before `upto` kept, from the lane's registers,
  // element kt_e.
  std::string element(ir::node_id root, std::size_t upto = 0) const {
    std::string s;
    if (!warp) s += row_coords(M);
    for (ir::node_id x : needed(root, upto)) {
      const ir::node& n = g[x];
      if (const int j = kept_by(x, upto); j >= 0) {
        s += cat("    const ", codegen::value_type(n.dtype), " ", name(x), " = kt_V", num(j),
                 "[kt_e];\n");
      } else if (n.o == ir::op::load) {
        const auto k = static_cast<std::size_t>(n.slot);
        s += cat("    const ", codegen::value_type(g.inputs[k].type), " ",
                 codegen::load_name(n.slot), " = ", warp ? lane_value(k) : load(k), ";\n");
      } else if (ir::info(n.o).cls != ir::op_class::leaf) {
        s += cat("    const ", codegen::value_type(n.dtype), " ", name(x), " = ",
                 codegen::render_node(g, x, [&](ir::node_id y) { return name(y); }), ";\n");
      }
    }
    return s;
  }

  std::string lane_value(std::size_t k) const {
    return along_row(g, k, K, M) == along::row_constant ? cat("kt_C", num(k))
                                                        : cat("kt_L", num(k), "[kt_e]");
  }

  // Warp form: body for each of the lane's elements kt_r = lane + 32 * kt_e inside the row,
  // unrolled so that the register arrays stay registers.
  std::string each_item(const std::string& body) const {
    return cat("#pragma unroll\n  for (int kt_e = 0; kt_e < ", num(items), "; ++kt_e) {\n",
               full ? "    {\n" : "    if (kt_e < kt_ne) {\n", body, "    }\n  }\n");
  }

  // Warp form: every input's elements of the row read once, all loads issued before any use
  // (contiguous rows through a pointer at constant offsets, as a hand-written kernel would).
  std::string preload() const {
    std::string s, body, word_body;
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      const std::string K_ = num(k), T = codegen::value_type(g.inputs[k].type);
      const scalar_type t = g.inputs[k].type;
      if (along_row(g, k, K, M) == along::row_constant) {
        s += cat("  const ", T, " kt_C", K_, " = ",
                 codegen::load_value(t, cat("kt_in", K_, "[kt_b", K_, "]")), ";\n");
        continue;
      }
      s += cat("  ", T, " kt_L", K_, "[", num(items), "];\n  KILN_GLOBAL const ", type_name(t),
               "* kt_p", K_, " = kt_in", K_, " + kt_b", K_, " + kt_lane", words ? " * 8" : "",
               ";\n");
      if (words && is_reduced_float(t)) {
        word_body += cat("    const uint4 kt_q", K_, " = ((KILN_GLOBAL const uint4*)kt_p", K_,
                         ")[32 * kt_w];\n");
        for (unsigned c = 0; c < 8; ++c)
          word_body +=
              cat("    kt_L", K_, "[8 * kt_w + ", num(c), "] = ",
                  codegen::half_of_word(t, cat("kt_q", K_, codegen::word_field(4, c / 2)), c % 2),
                  ";\n");
        continue;
      }
      body += cat("    kt_L", K_, "[kt_e] = ", full ? "" : "kt_e < kt_ne ? ",
                  codegen::load_value(t, cat("kt_p", K_, "[", at(), "]")),
                  full ? "" : cat(" : (", T, ")0"), ";\n");
    }
    if (!word_body.empty())
      s += cat("#pragma unroll\n  for (int kt_w = 0; kt_w < ", num(items / 8), "; ++kt_w) {\n",
               word_body, "  }\n");
    if (body.empty()) return s;
    return s + cat("#pragma unroll\n  for (int kt_e = 0; kt_e < ", num(items), "; ++kt_e) {\n",
                   body, "  }\n");
  }
  // Lane element kt_e's offset from the lane's first element.
  std::string at() const { return words ? "256 * (kt_e >> 3) + (kt_e & 7)" : "32 * kt_e"; }

  // Warp form: the output row, element by element or (words, 16-bit output) as 16-byte words.
  std::string store_row(ir::node_id root) const {
    const scalar_type t = g[root].dtype;
    std::string s = cat("  KILN_GLOBAL ", type_name(t), "* kt_q = kt_out + kt_oi * kt_rn + kt_lane",
                        words ? " * 8" : "", ";\n");
    if (!words || !is_reduced_float(t))
      return s +
             each_item(element(root, r.reds.size()) +
                       cat("    kt_q[", at(), "] = ", codegen::store_value(t, name(root)), ";\n"));
    s += cat("  uint32_t kt_O[", num(items), "];\n");
    s += each_item(element(root, r.reds.size()) +
                   cat("    kt_O[kt_e] = (uint32_t)", codegen::bits_of(t, name(root)), ";\n"));
    return s + cat("#pragma unroll\n  for (int kt_w = 0; kt_w < ", num(items / 8),
                   "; ++kt_w) {\n    uint4 kt_o;\n",
                   "    kt_o.x = kt_O[8 * kt_w] | (kt_O[8 * kt_w + 1] << 16);\n",
                   "    kt_o.y = kt_O[8 * kt_w + 2] | (kt_O[8 * kt_w + 3] << 16);\n",
                   "    kt_o.z = kt_O[8 * kt_w + 4] | (kt_O[8 * kt_w + 5] << 16);\n",
                   "    kt_o.w = kt_O[8 * kt_w + 6] | (kt_O[8 * kt_w + 7] << 16);\n",
                   "    ((KILN_GLOBAL uint4*)kt_q)[32 * kt_w] = kt_o;\n  }\n");
  }

  // Warp form of pass j: the lane's elements folded in registers, then a butterfly over the
  // warp's shuffles. Each step folds (lower lane's, higher lane's) on both lanes, so every lane
  // ends with the same bits (max of +0 and -0, a NaN's payload).
  std::string warp_pass(std::size_t j) const {
    const std::string A = acc_type(j), J = num(j), f = cat("kt_fold", J);
    const std::string a = cat("kt_a", J);
    const ir::node_id o = g[r.reds[j]].operands[0];
    std::string s = cat("  ", A, " ", a, " = kt_init", J, ";\n");
    std::string body = element(o, j) + cat("    ", a, " = ", f, "(", a, ", ", name(o), ");\n");
    if (keep[j]) {
      s += cat("  ", codegen::value_type(g[o].dtype), " kt_V", J, "[", num(items), "];\n");
      body += cat("    kt_V", J, "[kt_e] = ", name(o), ";\n");
    }
    s += each_item(body);
    s += cat("  for (uint32_t kt_h = 16; kt_h > 0; kt_h >>= 1) {\n    const ", A,
             " kt_sx = kiln__warp_shfl_xor(", a, ", kt_h);\n    ", a, " = (kt_lane & kt_h) ? ", f,
             "(kt_sx, ", a, ") : ", f, "(", a, ", kt_sx);\n  }\n");
    return s + cat("  const ", A, " kt_red", J, " = ", a, ";\n");
  }

  std::string fold_helper(std::size_t j) const {
    const std::string A = acc_type(j), f = cat("kt_fold", num(j));
    const ir::op o = g[r.reds[j]].o;
    if (o == ir::op::reduce_sum)
      return cat("KILN_FUNC ", A, " ", f, "(", A, " a, ", A, " b) { return a + b; }\n");
    const char* cmp = o == ir::op::reduce_min ? " < " : " > ";
    return cat("KILN_FUNC ", A, " ", f, "(", A, " a, ", A, " b) { return (a != a || a", cmp,
               "b) ? a : b; }\n");
  }

  // Pass j: four accumulators over this item's share of the row, merged, then (group) the
  // lanes' tree; every lane of the row reads the result, kt_red<j>.
  std::string pass(std::size_t j) const {
    const std::string A = acc_type(j), J = num(j), f = cat("kt_fold", J);
    const std::string v = name(g[r.reds[j]].operands[0]);
    std::string s;
    for (int u = 0; u < 4; ++u) s += cat("  ", A, " kt_a", J, "_", num(u), " = kt_init", J, ";\n");
    s += cat("  int64_t kt_rb", J, " = kt_lane;\n  for (; kt_rb", J, " + 3 * kt_st < kt_r1; kt_rb",
             J, " += 4 * kt_st) {\n");
    for (int u = 0; u < 4; ++u)
      s += cat("  {\n    const int64_t kt_r = kt_rb", J, " + ", num(u), " * kt_st;\n",
               element(g[r.reds[j]].operands[0]), "    kt_a", J, "_", num(u), " = ", f, "(kt_a", J,
               "_", num(u), ", ", v, ");\n  }\n");
    s += cat("  }\n  for (; kt_rb", J, " < kt_r1; kt_rb", J,
             " += kt_st) {\n    const int64_t kt_r = kt_rb", J, ";\n",
             element(g[r.reds[j]].operands[0]), "    kt_a", J, "_0 = ", f, "(kt_a", J, "_0, ", v,
             ");\n  }\n");
    const std::string acc =
        cat(f, "(", f, "(kt_a", J, "_0, kt_a", J, "_1), ", f, "(kt_a", J, "_2, kt_a", J, "_3))");
    if (!group) return s + cat("  const ", A, " kt_red", J, " = ", acc, ";\n");
    s += cat("  kt_sh", J, "[kt_t] = ", acc,
             ";\n  kiln_barrier();\n  for (uint32_t kt_h = ", num(lanes),
             " / 2; kt_h > 0; kt_h >>= 1) {\n    if (kt_lane < kt_h) kt_sh", J, "[kt_t] = ", f,
             "(kt_sh", J, "[kt_t], kt_sh", J, "[kt_t + kt_h]);\n", "    kiln_barrier();\n  }\n");
    return s;
  }

  std::string render() const {
    const ir::node_id root = g.roots.at(0);
    const std::string G = num(reduce_policy::group);
    std::string s = warp ? warp_definitions : "";
    for (const codegen::helper& h : codegen::helpers_in(g)) s += codegen::helper_def(h);
    for (std::size_t j = 0; j < r.reds.size(); ++j) s += fold_helper(j);
    s += cat("KILN_KERNEL void kt_rows(KILN_GLOBAL ", type_name(g[root].dtype),
             "* KILN_RESTRICT kt_out");
    for (std::size_t k = 0; k < g.inputs.size(); ++k)
      s +=
          cat(", KILN_GLOBAL const ", type_name(g.inputs[k].type), "* KILN_RESTRICT kt_in", num(k));
    for (std::size_t c = 0; c < g.captures.size(); ++c)
      s += cat(", ", type_name(g.captures[c].type), " ", codegen::capture_name(int(c)));
    for (std::size_t j = 0; j < r.reds.size(); ++j) s += cat(", ", acc_type(j), " kt_init", num(j));
    for (std::size_t d = 1; d < K; ++d) s += cat(", int64_t kt_k", num(d));
    for (std::size_t j = 1; j < M; ++j) s += cat(", int64_t kt_m", num(j));
    s += ", int64_t kt_rn, int64_t kt_nw";
    s += stride_params(g, K + M);
    s += ") {\n";
    if (warp) {
      // A warp per row, no barriers: a warp past the last row leaves as a whole.
      s += cat(
          "  const uint32_t kt_t = (uint32_t)kiln_local_id(0), kt_lane = kt_t & 31u;\n",
          "  const int64_t kt_oi = (int64_t)kiln_group_id(0) * ", num(reduce_policy::group / 32),
          " + (int64_t)(kt_t >> 5);\n  if (kt_oi >= kt_nw) return;\n",
          "  const int kt_ne = (int)((kt_rn - (int64_t)kt_lane + 31) / 32);  // this lane's\n");
      s += output_position(g, K) + preload();
      for (std::size_t j = 0; j < r.reds.size(); ++j) s += warp_pass(j);
      return s + store_row(root) + "}\n";
    }
    if (group) {
      for (std::size_t j = 0; j < r.reds.size(); ++j)
        s += cat("  KILN_LOCAL ", acc_type(j), " kt_sh", num(j), "[", G, "];\n");
      s += cat("  const uint32_t kt_t = (uint32_t)kiln_local_id(0);\n",
               "  const uint32_t kt_lane = kt_t % ", num(lanes), "u;\n",
               "  const int64_t kt_oi = (int64_t)kiln_group_id(0) * ",
               num(reduce_policy::group / lanes), " + kt_t / ", num(lanes), ";\n",
               "  const int64_t kt_r1 = kt_oi < kt_nw ? kt_rn : 0;\n");
    } else {
      s += "  const uint32_t kt_lane = 0;\n  const int64_t kt_oi = (int64_t)kiln_global_id(0);\n"
           "  const int64_t kt_r1 = kt_rn;\n";
    }
    s += cat("  const int64_t kt_st = ", num(lanes), ";\n");
    s += output_position(g, K);
    for (std::size_t j = 0; j < r.reds.size(); ++j) s += pass(j);
    // The same trip count for every item of the group (PoCL's vectorised work-group loops
    // crashed on a per-item one after the barriers).
    return s + cat("  for (int64_t kt_rb = 0; kt_rb < kt_rn; kt_rb += kt_st) {\n",
                   "    const int64_t kt_r = kt_rb + kt_lane;\n    if (kt_r >= kt_r1) continue;\n",
                   element(root), "    kt_out[kt_oi * kt_rn + kt_r] = ",
                   codegen::store_value(g[root].dtype, name(root)), ";\n  }\n}\n");
  }
};

}  // namespace

std::vector<const tensor_impl*> row_fusable(const tensor_impl& t) {
  std::vector<const tensor_impl*> reds;
  if (t.kind != tensor_kind::op || is_reduction(t)) return {};
  std::unordered_set<const tensor_impl*> seen;
  all_reductions(t, reds, seen);
  const auto rank = static_cast<std::uint32_t>(t.shape.size());
  for (const tensor_impl* r : reds) {
    const bool suffix = r->axes && ((r->axes + (r->axes & -r->axes)) >> rank) == 1;
    if ((r->o != ir::op::reduce_sum && r->o != ir::op::reduce_max && r->o != ir::op::reduce_min) ||
        r->args.at(0)->shape != t.shape || r->shape.size() != t.shape.size() ||
        r->axes != reds[0]->axes || !suffix || r->shape == t.shape)
      return {};
  }
  return reds;
}

row_lowered lower_rows(const tensor_impl& t) {
  row_lowered r;
  r.l.out_shape = t.shape;
  row_lowering w{r, t.shape, {}, {}};
  r.l.g.roots.push_back(w.visit(t));
  lay_out(r.l, t.shape, r.reds.empty() ? 0 : r.l.g[r.reds[0]].slot, w.strides);
  return r;
}

std::string render_rows(const row_lowered& r, std::uint32_t lanes) {
  return renderer{r, lanes, 0, false, nullptr}.render();
}

bool warp_row_words(const row_lowered& r, std::uint32_t items, bool full) {
  if (!items || !full || items % 8 != 0) return false;
  const ir::graph& g = r.l.g;
  const std::size_t K = r.l.kept.size(), M = r.l.reduced.size();
  bool any = is_reduced_float(g[g.roots.at(0)].dtype);
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    if (!is_reduced_float(g.inputs[k].type) || along_row(g, k, K, M) != along::contiguous) continue;
    any = true;
    if (r.l.leaves[k]->offset % 8 != 0) return false;  // every row must start on a word
    for (std::size_t d = 0; d < K; ++d)
      if (g.inputs[k].l.strides[d] % 8 != 0) return false;
  }
  return any;
}

std::string render_warp_rows(const row_lowered& r, std::uint32_t items, bool full,
                             const char* warp_definitions, bool words) {
  for (std::size_t k = 0; k < r.l.g.inputs.size(); ++k)
    if (along_row(r.l.g, k, r.l.kept.size(), r.l.reduced.size()) == along::other)
      throw invalid_argument("kiln: the warp form of a row kernel needs contiguous rows");
  if (words && !warp_row_words(r, items, full))
    throw invalid_argument(
        "kiln: the word form of a row kernel needs full rows of 16-bit arrays "
        "starting on 16-byte words");
  return renderer{r, 32, items, full, warp_definitions, words}.render();
}

std::uint32_t warp_row_items(const device& dev, const row_lowered& r, std::int64_t len) {
  if (len < row_warp_policy::min_len || len > row_warp_policy::max_len ||
      !dev.supports(feature::warp32))
    return 0;
  const codegen::target& t = codegen::target_for(dev.impl()->api->dialect);
  if (!t.warp || t.warp->lanes != 32) return 0;
  for (ir::node_id j : r.reds)  // accumulators the targets' shuffles move
    switch (r.l.g[j].dtype) {
      case scalar_type::f32:
      case scalar_type::f64:
      case scalar_type::i32:
      case scalar_type::u32:
      case scalar_type::i64:
      case scalar_type::u64:
      case scalar_type::f16:
      case scalar_type::bf16: break;
      default: return 0;
    }
  // Elements per lane: powers of two to 8, then multiples of 4 (few programs per expression,
  // few idle registers).
  std::uint32_t items = 1;
  while (items < 8 && 32 * std::int64_t{items} < len) items *= 2;
  while (32 * std::int64_t{items} < len) items += 4;
  std::size_t arrays = 0;
  for (std::size_t k = 0; k < r.l.g.inputs.size(); ++k)
    switch (along_row(r.l.g, k, r.l.kept.size(), r.l.reduced.size())) {
      case along::contiguous: ++arrays; break;
      case along::row_constant: break;
      case along::other: return 0;  // strided or several reduced dims: the group form
    }
  for (bool kept : kept_values(r)) arrays += kept;
  if (items * arrays > row_warp_policy::max_registers) return 0;
  return items;
}

std::shared_ptr<tensor_impl> run_rows(const tensor_impl& t) {
  const row_lowered r = lower_rows(t);
  auto out = allocate_tensor(t.dev, t.shape, t.dtype);
  const std::int64_t rows = r.l.outputs(), len = r.l.rows();
  if (rows == 0 || len == 0) return out;
  const std::uint32_t items = warp_row_items(t.dev, r, len);
  std::uint32_t lanes = items ? 32 : 1;
  if (!items && t.dev.supports(feature::barrier) && len >= reduce_policy::group_min_rows) {
    lanes = reduce_policy::min_lanes;
    while (lanes < reduce_policy::group && lanes * 2 * reduce_policy::elems_per_lane <= len)
      lanes *= 2;
  }
  ir::hasher h;
  h.add("tensor rows v2").add(r.l.kept.size()).add(r.l.reduced.size()).add(std::uint64_t{lanes});
  const bool full = items && len == 32 * std::int64_t{items};
  const bool words = warp_row_words(r, items, full);
  h.add(std::uint64_t{items}).add(std::uint64_t{full} | std::uint64_t{words} << 1);
  for (const ir::input& in : r.l.g.inputs) h.add_input(in);
  h.add_nodes(r.l.g);
  generated_kernels k = get_generated(t.dev, "tensor_rows", h.value(), [&] {
    return generated_program{
        items ? render_warp_rows(r, items, full,
                                 codegen::target_for(t.dev.impl()->api->dialect).warp->definitions,
                                 words)
              : render_rows(r, lanes),
        {"kt_rows"},
        ir::print(r.l.g)};
  });
  if (k.compiled) stats_now().programs_compiled++;
  if (log_enabled(log_level::trace))  // the arguments cost even when not logged
    logf(log_level::trace, "tensor rows {} {} on {}: {} rows of {}, {}", to_string(t.shape),
         type_name(t.dtype), t.dev.id(), rows, len,
         items ? fmt::format("warp form, {} per lane{}", items, words ? " in words" : "")
               : fmt::format("{} lanes", lanes));

  std::vector<arg_binding> a;
  add_mem(a, *out->mem, 0, t.dtype);
  for (const tensor_impl* x : r.l.leaves)
    add_mem(a, *x->mem, static_cast<std::uint64_t>(x->offset) * size_of(x->dtype), x->dtype);
  for (const ir::capture& c : r.l.g.captures) add_scalar(a, c);
  for (ir::node_id j : r.reds) add_scalar(a, reduce_init(r.l.g[j].o, r.l.g[j].dtype));
  for (std::size_t d = 1; d < r.l.kept.size(); ++d) a.push_back(bind_arg(r.l.kept[d]));
  for (std::size_t j = 1; j < r.l.reduced.size(); ++j) a.push_back(bind_arg(r.l.reduced[j]));
  a.push_back(bind_arg(len));
  a.push_back(bind_arg(rows));
  for (const ir::input& in : r.l.g.inputs)
    for (int d = 0; d < in.l.rank; ++d)
      if (ir::classify(in.l.dims[d], in.l.strides[d]) == ir::stride_class::general)
        a.push_back(bind_arg(in.l.strides[d]));
  queue& q = t.dev.default_queue();
  if (lanes > 1) {
    const std::uint64_t per_group = reduce_policy::group / lanes;
    const std::uint64_t groups = (std::uint64_t(rows) + per_group - 1) / per_group;
    const local_size ls(reduce_policy::group);
    launch(*k.kernels.at(0).impl(), *q.impl(), range(groups * reduce_policy::group), &ls, a.data(),
           a.size());
  } else {
    launch(*k.kernels.at(0).impl(), *q.impl(), range(std::uint64_t(rows)), nullptr, a.data(),
           a.size());
  }
  stats_now().kernel_launches++;
  return out;
}

}  // namespace kiln::detail
