// Kernel texts for the fused attention; see attention_kernels.hpp.
#include "tensor/attention_kernels.hpp"

#include <algorithm>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/queue.hpp"
#include "runtime/generated_kernels.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

// One operand's name in the kernel ("q": parameters kt_q, kt_q0, kt_q1, kt_qr), its width
// macro and the local tile it is staged in (tiled form).
struct operand {
  std::string name, width;
};

struct text {
  const attn_kernel_key& k;
  const attn_policy pol = attn_policy_of(k);
  const std::string X = type_name(k.x), A = type_name(attn_acc_type(k.x));
  const std::string unroll = k.unroll ? "#pragma unroll\n" : "";

  std::string header() const {
    return cat("#define KT_E ", num(k.e), "\n#define KT_EV ", num(k.ev), "\n#define KT_T ",
               num(pol.tile), "\n#define KT_G ", num(pol.rows), "\n#define KT_LD(x) ",
               codegen::load_value(k.x, "(x)"), "\n#define KT_ST(x) ",
               codegen::store_value(k.x, "(x)"),
               // A finite "minus infinity": exp(m - m) stays 1 for a row with no key seen yet.
               "\n#define KT_NEG ((", A, ")-1e30)\n");
  }
  std::string in(const std::string& n) const {
    return cat("KILN_GLOBAL const ", X, "* KILN_RESTRICT kt_", n, ", ");
  }
  std::string out(const std::string& n) const {
    return cat("KILN_GLOBAL ", X, "* KILN_RESTRICT kt_", n, ", ");
  }
  // The stride parameters of operands ns, each followed by ", ".
  static std::string strides(const std::vector<std::string>& ns) {
    std::string s;
    for (const std::string& n : ns)
      s += cat("int64_t kt_", n, "0, int64_t kt_", n, "1, int64_t kt_", n, "r, ");
    return s;
  }
  // Row `row` of operand n in this item's batch.
  static std::string row_ptr(const std::string& n, const std::string& row) {
    return cat("kt_", n, " + kt_b0 * kt_", n, "0 + kt_b1 * kt_", n, "1 + ", row, " * kt_", n, "r");
  }
  std::string each(const char* width, const std::string& body) const {
    return cat(unroll, "    for (int kt_e = 0; kt_e < ", width, "; ++kt_e) ", body, "\n");
  }

  // This item's row kt_i (kt_ic: clamped to a real row; kt_live: it is one) of kt_rows per
  // batch, its batch kt_bh (kt_b0, kt_b1 over kt_inner) and, tiled, kt_t and the group's first
  // row kt_i0.
  std::string prologue() const {
    std::string s;
    if (k.tiled)
      s = "  const int64_t kt_t = (int64_t)kiln_local_id(0);\n"
          "  const int64_t kt_blocks = (kt_rows + KT_G - 1) / KT_G;\n"
          "  const int64_t kt_bh = (int64_t)kiln_group_id(0) / kt_blocks;\n"
          "  const int64_t kt_i0 = ((int64_t)kiln_group_id(0) % kt_blocks) * KT_G;\n"
          "  const int64_t kt_i = kt_i0 + kt_t;\n";
    else
      s = "  const int64_t kt_bh = (int64_t)kiln_global_id(0) / kt_rows;\n"
          "  const int64_t kt_i = (int64_t)kiln_global_id(0) % kt_rows;\n";
    return s +
           "  const bool kt_live = kt_i < kt_rows;\n"
           "  const int64_t kt_ic = kt_live ? kt_i : kt_rows - 1;\n"
           "  const int64_t kt_b0 = kt_bh / kt_inner, kt_b1 = kt_bh % kt_inner;\n";
  }

  // Loads `width` values of row kt_ic of operand n into register array `reg`, times `mul`.
  std::string load_row(const std::string& n, const char* width, const std::string& reg,
                       const std::string& mul) const {
    return cat("  ", A, " ", reg, "[", width, "];\n  {\n    KILN_GLOBAL const ", X,
               "* kt_p = ", row_ptr(n, "kt_ic"), ";\n",
               each(width, cat("{ ", reg, "[kt_e] = KT_LD(kt_p[kt_e])", mul, "; }")), "  }\n");
  }
  std::string zeros(const char* width, const std::string& reg) const {
    return cat("  ", A, " ", reg, "[", width, "];\n", each(width, cat("{ ", reg, "[kt_e] = 0; }")));
  }
  // Stores register array reg (times mul) into row kt_i of operand n, when the item is live.
  std::string store_row(const std::string& n, const char* width, const std::string& reg,
                        const std::string& mul) const {
    return cat("  if (kt_live) {\n    KILN_GLOBAL ", X, "* kt_p = ", row_ptr(n, "kt_i"), ";\n",
               each(width, cat("{ kt_p[kt_e] = KT_ST(", reg, "[kt_e]", mul, "); }")), "  }\n");
  }

  // Element kt_e of the other row kt_jj of the tile (kt_j = kt_j0 + kt_jj) of operand o.
  std::string at(const operand& o) const {
    return k.tiled ? cat("kt_tile_", o.name, "[kt_jj * ", o.width, " + kt_e]")
                   : cat("KT_LD(kt_", o.name, "b[kt_j * kt_", o.name, "r + kt_e])");
  }
  // A per-row statistic (lse, d) of the other row.
  std::string stat(const std::string& n) const {
    return k.tiled ? cat("kt_tile_", n, "[kt_jj]") : cat("kt_", n, "[kt_bh * kt_other + kt_j]");
  }

  // The loop over the other rows [start, end) in tiles of KT_T: `body` runs for each tile
  // (its loops over kt_jj written by the caller). Tiled: the operands' tile rows staged in
  // local memory first (start and end must be the same for the whole group).
  std::string tiles(const std::string& start, const std::string& end,
                    const std::vector<operand>& ops, const std::vector<std::string>& stats,
                    const std::string& body) const {
    std::string s;
    if (k.tiled) {
      for (const operand& o : ops)
        s += cat("  KILN_LOCAL ", A, " kt_tile_", o.name, "[KT_T * ", o.width, "];\n");
      for (const std::string& n : stats) s += cat("  KILN_LOCAL ", A, " kt_tile_", n, "[KT_T];\n");
    }
    for (const operand& o : ops)
      s += cat("  KILN_GLOBAL const ", X, "* kt_", o.name, "b = ", row_ptr(o.name, "0"), ";\n");
    s += cat("  for (int64_t kt_j0 = ", start, "; kt_j0 < ", end, "; kt_j0 += KT_T) {\n");
    if (k.tiled) {
      for (const operand& o : ops)
        s += cat("    for (int64_t kt_x = kt_t; kt_x < KT_T * ", o.width,
                 "; kt_x += KT_G) {\n      const int64_t kt_o = kt_j0 + kt_x / ", o.width,
                 ";\n      kt_tile_", o.name, "[kt_x] = kt_o < kt_other ? KT_LD(kt_", o.name,
                 "b[kt_o * kt_", o.name, "r + kt_x % ", o.width, "]) : (", A, ")0;\n    }\n");
      for (const std::string& n : stats)
        s += cat("    if (kt_t < KT_T) kt_tile_", n, "[kt_t] = kt_j0 + kt_t < kt_other ? kt_", n,
                 "[kt_bh * kt_other + kt_j0 + kt_t] : (", A, ")0;\n");
      s += "    kiln_barrier();\n";
    }
    s += body;
    if (k.tiled) s += "    kiln_barrier();\n";
    return s + "  }\n";
  }
  // `body` for each other row kt_j of the tile that this item's row uses.
  std::string each_other(const std::string& valid, const std::string& body) const {
    return cat(unroll, "    for (int kt_jj = 0; kt_jj < KT_T; ++kt_jj) {\n",
               "      const int64_t kt_j = kt_j0 + kt_jj;\n      if (", valid, ") {\n", body,
               "      }\n    }\n");
  }
  std::string dot(const std::string& reg, const char* width, const operand& o,
                  const std::string& into) const {
    return cat("        ", A, " ", into, " = 0;\n",
               each(width, cat("{ ", into, " += ", reg, "[kt_e] * ", at(o), "; }")));
  }

  // Query rows see keys [0, end): the group-uniform end (tiled) or the row's own.
  std::string key_end() const {
    if (!k.causal) return "kt_other";
    return k.tiled ? "min(kt_other, min(kt_rows, kt_i0 + KT_G))" : "min(kt_other, kt_i + 1)";
  }
  std::string key_valid() const {
    return k.causal ? "kt_j < kt_other && kt_j <= kt_ic" : "kt_j < kt_other";
  }

  std::string params_tail() const { return cat(A, " kt_scale) {\n"); }

  std::string forward() const {
    const operand K{"k", "KT_E"}, V{"v", "KT_EV"};
    std::string s =
        cat("KILN_KERNEL void kt_attn(", out("o"), "KILN_GLOBAL ", A, "* KILN_RESTRICT kt_lse, ",
            in("q"), in("k"), in("v"), "int64_t kt_inner, int64_t kt_rows, int64_t kt_other, ",
            strides({"q", "k", "v", "o"}), params_tail());
    s += prologue() + load_row("q", "KT_E", "kt_qv", " * kt_scale") + zeros("KT_EV", "kt_acc");
    s += cat("  ", A, " kt_m = KT_NEG, kt_sum = 0;\n");
    std::string body = cat("    ", A, " kt_sc[KT_T];\n    ", A, " kt_bm = kt_m;\n");
    body += cat(unroll, "    for (int kt_jj = 0; kt_jj < KT_T; ++kt_jj) {\n",
                "      const int64_t kt_j = kt_j0 + kt_jj;\n      ", A, " kt_x = KT_NEG;\n",
                "      if (", key_valid(), ") {\n", dot("kt_qv", "KT_E", K, "kt_d"),
                "        kt_x = kt_d;\n      }\n      kt_sc[kt_jj] = kt_x;\n",
                "      kt_bm = kt_x > kt_bm ? kt_x : kt_bm;\n    }\n");
    body += cat("    const ", A, " kt_cr = exp(kt_m - kt_bm);\n    kt_sum *= kt_cr;\n",
                each("KT_EV", "{ kt_acc[kt_e] *= kt_cr; }"), "    kt_m = kt_bm;\n");
    body +=
        each_other(key_valid(), cat("        const ", A, " kt_p = exp(kt_sc[kt_jj] - kt_m);\n",
                                    "        kt_sum += kt_p;\n",
                                    each("KT_EV", cat("{ kt_acc[kt_e] += kt_p * ", at(V), "; }"))));
    s += tiles("0", key_end(), {K, V}, {}, body);
    s += cat("  const ", A, " kt_inv = (", A, ")1 / kt_sum;\n");
    s += store_row("o", "KT_EV", "kt_acc", " * kt_inv");
    s += "  if (kt_live) kt_lse[kt_bh * kt_rows + kt_i] = kt_m + log(kt_sum);\n}\n";
    return s;
  }

  std::string delta() const {
    return cat("KILN_KERNEL void kt_attn(KILN_GLOBAL ", A, "* KILN_RESTRICT kt_d, ", in("g"),
               in("o"), strides({"g", "o"}), "int64_t kt_inner, int64_t kt_rows) {\n", prologue(),
               "  KILN_GLOBAL const ", X, "* kt_gp = ", row_ptr("g", "kt_i"), ";\n",
               "  KILN_GLOBAL const ", X, "* kt_op = ", row_ptr("o", "kt_i"), ";\n  ", A,
               " kt_s = 0;\n",
               each("KT_EV", "{ kt_s += KT_LD(kt_gp[kt_e]) * KT_LD(kt_op[kt_e]); }"),
               "  kt_d[kt_bh * kt_rows + kt_i] = kt_s;\n}\n");
  }

  std::string dq() const {
    const operand K{"k", "KT_E"}, V{"v", "KT_EV"};
    std::string s =
        cat("KILN_KERNEL void kt_attn(", out("dq"), in("q"), in("k"), in("v"), in("g"),
            "KILN_GLOBAL const ", A, "* KILN_RESTRICT kt_lse, KILN_GLOBAL const ", A,
            "* KILN_RESTRICT kt_d, int64_t kt_inner, int64_t kt_rows, int64_t kt_other, ",
            strides({"q", "k", "v", "g", "dq"}), params_tail());
    s += prologue() + load_row("q", "KT_E", "kt_qv", " * kt_scale") +
         load_row("g", "KT_EV", "kt_gv", "") + zeros("KT_E", "kt_acc");
    s += cat("  const ", A,
             " kt_li = kt_lse[kt_bh * kt_rows + kt_ic], kt_di = kt_d[kt_bh * kt_rows + kt_ic];\n");
    const std::string body = each_other(
        key_valid(), cat(dot("kt_qv", "KT_E", K, "kt_x"), "        const ", A,
                         " kt_p = exp(kt_x - kt_li);\n", dot("kt_gv", "KT_EV", V, "kt_dp"),
                         "        const ", A, " kt_ds = kt_p * (kt_dp - kt_di);\n",
                         each("KT_E", cat("{ kt_acc[kt_e] += kt_ds * ", at(K), "; }"))));
    s += tiles("0", key_end(), {K, V}, {}, body);
    return s + store_row("dq", "KT_E", "kt_acc", " * kt_scale") + "}\n";
  }

  // One item per key row: the other rows are the queries (q, dO, lse, D).
  std::string dkdv() const {
    const operand Q{"q", "KT_E"}, G{"g", "KT_EV"};
    std::string s =
        cat("KILN_KERNEL void kt_attn(", out("dk"), out("dv"), in("q"), in("k"), in("v"), in("g"),
            "KILN_GLOBAL const ", A, "* KILN_RESTRICT kt_lse, KILN_GLOBAL const ", A,
            "* KILN_RESTRICT kt_d, int64_t kt_inner, int64_t kt_rows, int64_t kt_other, ",
            strides({"q", "k", "v", "g", "dk", "dv"}), params_tail());
    s += prologue() + load_row("k", "KT_E", "kt_kv", " * kt_scale") +
         load_row("v", "KT_EV", "kt_vv", "") + zeros("KT_E", "kt_ak") + zeros("KT_EV", "kt_av");
    // Causal: query i sees key j when i >= j, so the group's keys need queries from its first.
    const std::string start = !k.causal ? "0" : k.tiled ? "kt_i0" : "kt_i";
    const std::string valid = k.causal ? "kt_j < kt_other && kt_j >= kt_ic" : "kt_j < kt_other";
    const std::string body = each_other(
        valid,
        cat(dot("kt_kv", "KT_E", Q, "kt_x"), "        const ", A, " kt_p = exp(kt_x - ",
            stat("lse"), ");\n        ", A, " kt_dp = 0;\n",
            each("KT_EV", cat("{ const ", A, " kt_gg = ", at(G),
                              "; kt_av[kt_e] += kt_p * kt_gg; kt_dp += kt_vv[kt_e] * kt_gg; }")),
            "        const ", A, " kt_ds = kt_p * (kt_dp - ", stat("d"), ");\n",
            each("KT_E", cat("{ kt_ak[kt_e] += kt_ds * ", at(Q), "; }"))));
    s += tiles(start, "kt_other", {Q, G}, {"lse", "d"}, body);
    return s + store_row("dk", "KT_E", "kt_ak", " * kt_scale") +
           store_row("dv", "KT_EV", "kt_av", "") + "}\n";
  }
};

const char* kind_name(attn_kernel_kind k) {
  switch (k) {
    case attn_kernel_kind::forward: return "forward";
    case attn_kernel_kind::delta: return "backward delta";
    case attn_kernel_kind::dq: return "backward dq";
    case attn_kernel_kind::dkdv: return "backward dk dv";
  }
  return "?";
}

}  // namespace

scalar_type attn_acc_type(scalar_type x) {
  return x == scalar_type::f64 ? scalar_type::f64 : scalar_type::f32;
}

attn_policy attn_policy_of(const attn_kernel_key& k) {
  attn_policy p{64, 32};
  if (!k.tiled) return p;
  // The tiles (plus lse and D for dkdv) within 24 KB of local memory.
  const std::uint64_t bytes = size_of(attn_acc_type(k.x)) * (k.e + k.ev + 2);
  while (p.tile > 4 && p.tile * bytes > 24 * 1024) p.tile /= 2;
  return p;
}

std::string attn_source(const attn_kernel_key& k) {
  const text t{k};
  std::string body;
  switch (k.kind) {
    case attn_kernel_kind::forward: body = t.forward(); break;
    case attn_kernel_kind::delta: body = t.delta(); break;
    case attn_kernel_kind::dq: body = t.dq(); break;
    case attn_kernel_kind::dkdv: body = t.dkdv(); break;
  }
  return t.header() + body;
}

void launch_attn(const device& dev, const attn_kernel_key& k, std::vector<arg_binding> args,
                 std::int64_t batches, std::int64_t rows_per_batch) {
  if (batches <= 0 || rows_per_batch <= 0) return;
  ir::hasher h;
  h.add("tensor attention v1")
      .add(std::uint64_t(k.kind))
      .add(std::uint64_t(k.x))
      .add(std::uint64_t(k.e) << 32 | k.ev)
      .add(std::uint64_t(k.causal) | std::uint64_t(k.tiled) << 1 | std::uint64_t(k.unroll) << 2);
  const generated_kernels g = get_generated(dev, "tensor_attention", h.value(), [&] {
    return generated_program{
        attn_source(k),
        {"kt_attn"},
        cat("attention ", kind_name(k.kind), " of ", type_name(k.x), ", ", num(k.e), "/", num(k.ev),
            k.causal ? ", causal" : "", k.tiled ? ", tiled" : "")};
  });
  if (g.compiled) stats_now().programs_compiled++;
  queue& q = dev.default_queue();
  const attn_policy p = attn_policy_of(k);
  const auto b = static_cast<std::uint64_t>(batches),
             r = static_cast<std::uint64_t>(rows_per_batch);
  if (k.tiled) {
    const local_size ls(p.rows);
    launch(*g.kernels.at(0).impl(), *q.impl(), range(b * ((r + p.rows - 1) / p.rows) * p.rows), &ls,
           args.data(), args.size());
  } else {
    launch(*g.kernels.at(0).impl(), *q.impl(), range(b * r), nullptr, args.data(), args.size());
  }
  stats_now().kernel_launches++;
}

}  // namespace kiln::detail
