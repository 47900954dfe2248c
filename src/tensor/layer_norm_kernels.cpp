// Kernel texts for layer_norm and rms_norm; see layer_norm_kernels.hpp.
#include "tensor/layer_norm_kernels.hpp"

#include <algorithm>

#include "codegen/expr_render.hpp"
#include "codegen/half_words.hpp"
#include "codegen/target.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/queue.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/runtime.hpp"
#include "tensor/layer_norm_text.hpp"
#include "tensor/reduce_kernel.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;
constexpr std::uint32_t group = reduce_policy::group;

struct text : norm_text_base {
  const bool grouped = k.lanes > 1;
  const bool warp = grouped && k.warp;
  const std::string L = num(k.lanes), R = num(group / std::max(k.lanes, 1u));

  // Row `kt_row` of this item; kt_end is 0 for items past the last row (they still take part
  // in the barriers), kt_base a valid row start for every item.
  std::string prologue() const {
    if (!grouped)
      return "  const int64_t kt_lane = 0, kt_row = (int64_t)kiln_global_id(0);\n"
             "  const int64_t kt_end = kt_n, kt_rc = kt_row, kt_base = kt_row * kt_n;\n";
    return cat("  const uint32_t kt_t = (uint32_t)kiln_local_id(0);\n",
               "  const int64_t kt_lane = (int64_t)(kt_t % ", L, "u);\n",
               "  const int64_t kt_row = (int64_t)kiln_group_id(0) * ", R, " + kt_t / ", L, ";\n",
               "  const int64_t kt_end = kt_row < kt_rows ? kt_n : 0;\n",
               "  const int64_t kt_rc = kt_row < kt_rows ? kt_row : 0, kt_base = kt_rc * kt_n;\n");
  }

  // Sums `terms` (one expression per accumulator kt_s<first + j>, total kt_p<first + j>, reading
  // element kt_i through `pre`) over this item's share of the row: four-way unrolled for
  // independent adds.
  std::string fold(std::size_t first, const std::string& pre,
                   const std::vector<std::string>& terms) const {
    std::string s;
    for (std::size_t j = 0; j < terms.size(); ++j)
      for (int u = 0; u < 4; ++u)
        s += cat("  ", A, " kt_s", num(first + j), "_", num(u), " = 0;\n");
    s += cat("  {\n    int64_t kt_i0 = kt_lane;\n    for (; kt_i0 + 3 * ", L,
             " < kt_end; kt_i0 += 4 * ", L, ") {\n");
    for (int u = 0; u < 4; ++u) {
      s += cat("      {\n        const int64_t kt_i = kt_i0 + ", num(u), " * ", L, ";\n", pre);
      for (std::size_t j = 0; j < terms.size(); ++j)
        s += cat("        kt_s", num(first + j), "_", num(u), " += ", terms[j], ";\n");
      s += "      }\n";
    }
    s += cat("    }\n    for (; kt_i0 < kt_end; kt_i0 += ", L,
             ") {\n      const int64_t kt_i = kt_i0;\n", pre);
    for (std::size_t j = 0; j < terms.size(); ++j)
      s += cat("      kt_s", num(first + j), "_0 += ", terms[j], ";\n");
    s += "    }\n  }\n";
    for (std::size_t j = 0; j < terms.size(); ++j) {
      const std::string J = num(first + j);
      s += cat("  const ", A, " kt_p", J, " = (kt_s", J, "_0 + kt_s", J, "_1) + (kt_s", J,
               "_2 + kt_s", J, "_3);\n");
    }
    return s;
  }

  // The row totals of kt_p<first..first+count>: in local kt_sh<j> (read at kt_t - kt_lane, not
  // copied: a private copy living across later barriers crashed PoCL's work-group loops) or
  // private kt_tot<j>. tot(j) names the total.
  std::string reduce(std::size_t first, std::size_t count) const {
    std::string s;
    if (warp) {
      // Warp32 devices: each warp folds by shuffles (every lane gets its warp's total), lane 0
      // of each warp keeps it in local memory, and after one barrier each item adds its row's
      // L / 32 warp totals in order: one barrier per reduction instead of log2(L).
      for (std::size_t j = first; j < first + count; ++j) {
        const std::string J = num(j);
        s += cat("  ", A, " kt_w", J, " = kt_p", J, ";\n",
                 "  for (uint32_t kt_h = 16; kt_h > 0; kt_h >>= 1) kt_w", J,
                 " += kiln__warp_shfl_xor(kt_w", J, ", kt_h);\n", "  if ((kt_t & 31u) == 0) kt_sh",
                 J, "[kt_t >> 5] = kt_w", J, ";\n");
      }
      s += "  kiln_barrier();\n";
      for (std::size_t j = first; j < first + count; ++j) {
        const std::string J = num(j);
        s += cat("  ", A, " kt_tot", J, " = 0;\n  for (uint32_t kt_q = 0; kt_q < ",
                 num(k.lanes / 32), "u; ++kt_q) kt_tot", J, " += kt_sh", J,
                 "[((kt_t - (uint32_t)kt_lane) >> 5) + kt_q];\n");
      }
      return s;
    }
    if (!grouped) {
      for (std::size_t j = first; j < first + count; ++j)
        s += cat("  const ", A, " kt_tot", num(j), " = kt_p", num(j), ";\n");
      return s;
    }
    for (std::size_t j = first; j < first + count; ++j)
      s += cat("  kt_sh", num(j), "[kt_t] = kt_p", num(j), ";\n");
    s += cat("  kiln_barrier();\n  for (uint32_t kt_h = ", L,
             " / 2; kt_h > 0; kt_h >>= 1) {\n    if ((uint32_t)kt_lane < kt_h) {\n");
    for (std::size_t j = first; j < first + count; ++j)
      s += cat("      kt_sh", num(j), "[kt_t] += kt_sh", num(j), "[kt_t + kt_h];\n");
    return s + "    }\n    kiln_barrier();\n  }\n";
  }
  std::string tot(std::size_t j) const {
    return grouped && !warp ? cat("kt_sh", num(j), "[kt_t - (uint32_t)kt_lane]")
                            : cat("kt_tot", num(j));
  }
  std::string locals(std::size_t count) const {
    std::string s;
    for (std::size_t j = 0; j < count; ++j)
      s += cat("  KILN_LOCAL ", A, " kt_sh", num(j), "[", num(group), "];\n");
    return s;
  }
  // The last pass: the same trip count for every item of a group (PoCL's vectorised
  // work-group loops crashed on a per-item one after barriers, see row_kernel.cpp).
  std::string last_loop(const std::string& body) const {
    return cat("  for (int64_t kt_i0 = 0; kt_i0 < kt_n; kt_i0 += ", L,
               ") {\n    const int64_t kt_i = kt_i0 + kt_lane;\n",
               "    if (kt_i >= kt_end) continue;\n", body, "  }\n");
  }

  // kt_mu and kt_r, the row's mean and rstd (texts over the row totals), also stored. The
  // local-memory tree leaves the totals in lane 0's slots: lane 0 shares both through kt_st
  // after a barrier. Warp reductions and single items hold them privately: no exchange.
  std::string statistics(const std::string& mean, const std::string& rstd) const {
    if (grouped && !warp)
      return cat("  if (kt_lane == 0) {\n    kt_st[2 * (kt_t / ", L, ")] = ", mean, ";\n",
                 "    kt_st[2 * (kt_t / ", L, ") + 1] = ", rstd, ";\n",
                 "    if (kt_row < kt_rows) {\n",
                 k.rms ? "" : cat("      kt_mean[kt_row] = kt_st[2 * (kt_t / ", L, ")];\n"),
                 "      kt_rstd[kt_row] = kt_st[2 * (kt_t / ", L, ") + 1];\n    }\n  }\n",
                 "  kiln_barrier();\n  const ", A, " kt_mu = kt_st[2 * (kt_t / ", L,
                 ")], kt_r = kt_st[2 * (kt_t / ", L, ") + 1];\n");
    return cat("  const ", A, " kt_mu = ", mean, ", kt_r = ", rstd, ";\n",
               grouped ? "  if (kt_lane == 0 && kt_row < kt_rows) {\n" : "  {\n",
               k.rms ? "" : "    kt_mean[kt_row] = kt_mu;\n", "    kt_rstd[kt_row] = kt_r;\n  }\n");
  }

  std::string stat_local() const {
    return warp ? "" : cat("  KILN_LOCAL ", A, " kt_st[", num(2 * group / k.lanes), "];\n");
  }

  std::string forward() const {
    std::string s = cat("KILN_KERNEL void kt_ln(", out(X, "kt_y"), ", ");
    if (!k.rms) s += out(A, "kt_mean") + ", ";
    s += out(A, "kt_rstd") + in(X, "kt_x");
    if (k.has_w) s += in(W, "kt_w");
    if (k.has_b) s += in(W, "kt_b");
    s += cat(", int64_t kt_n, int64_t kt_rows, ", A, " kt_eps) {\n");
    if (grouped) s += locals(2) + stat_local();
    s += prologue();
    const std::string xv = cat("        const ", A, " kt_v = ", lx("kt_x[kt_base + kt_i]"), ";\n");
    std::string mean = "0";
    if (!k.rms) {
      s += fold(0, xv, {"kt_v"}) + reduce(0, 1);
      mean = cat("(", tot(0), " / (", A, ")kt_n)");
      if (!grouped) {
        s += cat("  const ", A, " kt_m = ", mean, ";\n");
        mean = "kt_m";
      }
    }
    s += fold(1, xv + cat("        const ", A, " kt_d = kt_v - ", mean, ";\n"), {"kt_d * kt_d"}) +
         reduce(1, 1);
    const std::string rstd = cat("rsqrt(", tot(1), " / (", A, ")kt_n + kt_eps)");
    s += statistics(mean, rstd);
    std::string v = cat("(", lx("kt_x[kt_base + kt_i]"), " - kt_mu) * kt_r");
    if (k.has_w) v = cat("(", v, ") * ", lw("kt_w[kt_i]"));
    if (k.has_b) v = cat(v, " + ", lw("kt_b[kt_i]"));
    return s +
           last_loop(cat("    const ", A, " kt_o = ", v, ";\n    kt_y[kt_base + kt_i] = ",
                         codegen::store_value(k.x, "kt_o"), ";\n")) +
           "}\n";
  }

  // ---- the cached forms: each lane keeps its k.cap elements of the row in registers ----
  std::string each(const std::string& f) const {  // f with "#" spelled as each c
    std::string s;
    for (std::uint32_t c = 0; c < k.cap; ++c) s += codegen::with_element_type(f, num(c));
    return s;
  }
  std::string tree(const std::string& term) const {  // pairwise sum of term over c ("#": c)
    std::vector<std::string> v;
    for (std::uint32_t c = 0; c < k.cap; ++c) v.push_back(codegen::with_element_type(term, num(c)));
    while (v.size() > 1) {
      std::vector<std::string> w;
      for (std::size_t i = 0; i + 1 < v.size(); i += 2)
        w.push_back(cat("(", v[i], " + ", v[i + 1], ")"));
      if (v.size() % 2) w.push_back(v.back());
      v = std::move(w);
    }
    return v.at(0);
  }

  // Slot c's element of the row: lane + c L, or with words of V elements, element c % V of
  // word lane + (c / V) L.
  std::string slot_index(std::uint32_t c) const {
    if (k.vec <= 1) return cat("kt_lane + ", num(c), " * ", L);
    const std::uint32_t v = k.vec;
    return cat("kt_lane * ", num(v), " + ", num(c / v * k.lanes * v + c % v));
  }
  // The slots' element indices; with words, also whether each word (kt_okw<w>) and so each
  // slot (kt_ok<c>) lies in the row: one comparison per word, not per element (the per-element
  // indices then go unused and the compiler drops them: fewer registers).
  std::string indices() const {
    std::string s;
    for (std::uint32_t c = 0; c < k.cap; ++c)
      s += cat("  const int64_t kt_i", num(c), " = ", slot_index(c), ";\n");
    if (k.vec <= 1) return s;
    for (std::uint32_t w = 0; w * k.vec < k.cap; ++w)
      s += cat("  const bool kt_okw", num(w), " = kt_i", num(w * k.vec), " < kt_end;\n");
    for (std::uint32_t c = 0; c < k.cap; ++c)
      s += cat("  const bool kt_ok", num(c), " = kt_okw", num(c / k.vec), ";\n");
    return s;
  }
  // Whether slot "T_" lies in the row (after indices() or the f32 forward's own indices).
  std::string valid() const { return k.vec > 1 ? "kt_okT_" : "kt_iT_ < kt_end"; }
  // "const A <name>c = row element of slot c (0 past the end)" for every slot, from row kt_base
  // of `ptr`: element by element, or (vec) a 16-byte word of 8 elements at a time.
  std::string loads(const std::string& ptr, const std::string& name) const {
    if (k.vec <= 1)
      return each(cat("  const ", A, " ", name, "T_ = kt_iT_ < kt_end ? ",
                      lx(cat(ptr, "[kt_base + kt_iT_]")), " : (", A, ")0;\n"));
    return word_loads(cat("(", ptr, " + kt_base)"), name, k.x);
  }
  // The same from the row starting at `row` (a pointer expression) of 16-bit type t.
  std::string word_loads(const std::string& row, const std::string& name, scalar_type t) const {
    std::string s;
    for (std::uint32_t w = 0; w * k.vec < k.cap; ++w) {
      const std::string q = cat(name, "_q", num(w));
      s += cat("  uint4 ", q, ";\n  ", q, ".x = ", q, ".y = ", q, ".z = ", q, ".w = 0u;\n",
               "  if (kt_okw", num(w), ") ", q, " = ((KILN_GLOBAL const uint4*)", row,
               ")[kt_lane + ", num(w * k.lanes), "];\n");
      for (std::uint32_t e = 0; e < k.vec; ++e)
        s += cat("  const ", A, " ", name, num(w * k.vec + e), " = ",
                 codegen::half_of_word(t, q + codegen::word_field(4, e / 2), e % 2), ";\n");
    }
    return s;
  }
  // "const A <name>c = parameter element of slot c" for every slot, from a weight or bias
  // (one row, shared by all) read in words of 8: a uint4 of 16-bit or two float4 of f32 values.
  std::string param_word_loads(const std::string& ptr, const std::string& name) const {
    if (is_reduced_float(k.w)) return word_loads(ptr, name, k.w);
    std::string s;
    for (std::uint32_t w = 0; w * k.vec < k.cap; ++w) {
      const std::string q = cat(name, "_q", num(w)), at = cat("kt_lane + ", num(w * k.lanes));
      for (int h = 0; h < 2; ++h) {
        const std::string f = cat(q, "_", num(h));
        s += cat("  float4 ", f, ";\n  ", f, ".x = ", f, ".y = ", f, ".z = ", f, ".w = 0.0f;\n",
                 "  if (kt_okw", num(w), ") ", f, " = ((KILN_GLOBAL const float4*)", ptr, ")[2 * (",
                 at, ") + ", num(h), "];\n");
      }
      for (std::uint32_t e = 0; e < k.vec; ++e)
        s += cat("  const ", A, " ", name, num(w * k.vec + e), " = ", q, "_", num(e / 4), ".",
                 std::string(1, "xyzw"[e % 4]), ";\n");
    }
    return s;
  }

  // Stores value(c) (text with "T_" for the slot) into row kt_base of `ptr` for every slot in
  // the row.
  std::string stores(const std::string& ptr, const std::string& value) const {
    if (k.vec <= 1)
      return each(cat("  if (kt_iT_ < kt_end) ", ptr,
                      "[kt_base + kt_iT_] = ", codegen::store_value(k.x, value), ";\n"));
    std::string s;
    for (std::uint32_t w = 0; w * k.vec < k.cap; ++w) {
      s += cat("  if (kt_okw", num(w), ") {\n    uint4 kt_q;\n");
      const auto bits = [&](std::uint32_t c) {
        return codegen::bits_of(k.x, codegen::with_element_type(value, num(c)));
      };
      for (std::uint32_t e = 0; e < k.vec; e += 2)
        s += cat("    kt_q", codegen::word_field(4, e / 2), " = ",
                 codegen::pack_bits(bits(w * k.vec + e), bits(w * k.vec + e + 1)), ";\n");
      s += cat("    ((KILN_GLOBAL uint4*)(", ptr, " + kt_base))[kt_lane + ", num(w * k.lanes),
               "] = kt_q;\n  }\n");
    }
    return s;
  }

  // Rows of one warp (lanes == 32: rows of up to 1024 elements), cached: the mean and then the
  // sum of squared deviations about it, each folded by shuffles alone (every lane gets the
  // total; no local memory, no barrier). On an H200 this beat Chan et al.'s one-fold merge of
  // (count, mean, M2) triples across the butterfly: bf16 [65536, 1024] 0.101 -> 0.089 ms,
  // [8192, 768] 0.026 -> 0.022 ms.
  bool one_warp() const { return warp && k.lanes == 32; }
  std::string warp_total(const std::string& name, const std::string& value) const {
    return cat("  ", A, " ", name, " = ", value,
               ";\n  for (uint32_t kt_h = 16; kt_h > 0; kt_h >>= 1) ", name,
               " += kiln__warp_shfl_xor(", name, ", kt_h);\n");
  }

  std::string forward_cached() const {
    std::string s = cat("KILN_KERNEL void kt_ln(", out(X, "kt_y"), ", ");
    if (!k.rms) s += out(A, "kt_mean") + ", ";
    s += out(A, "kt_rstd") + in(X, "kt_x");
    if (k.has_w) s += in(W, "kt_w");
    if (k.has_b) s += in(W, "kt_b");
    s += cat(", int64_t kt_n, int64_t kt_rows, ", A, " kt_eps) {\n");
    s += (one_warp() ? "" : locals(2)) + stat_local() + prologue();
    // f32: each slot's index beside its load (hoisting the indices cost 8% on an H200)
    if (k.vec <= 1)
      s += each(cat("  const int64_t kt_iT_ = kt_lane + T_ * ", L, ";\n  const ", A,
                    " kt_cT_ = kt_iT_ < kt_end ? ", lx("kt_x[kt_base + kt_iT_]"), " : (", A,
                    ")0;\n"));
    else
      s += indices() + word_loads("(kt_x + kt_base)", "kt_c", k.x);
    if (one_warp()) {
      std::string mean = "0";
      if (!k.rms) {
        s += warp_total("kt_gm", tree("kt_cT_"));
        mean = "kt_m";
        s += cat("  const ", A, " kt_m = kt_gm / (", A, ")kt_n;\n");
      }
      s +=
          each(cat("  const ", A, " kt_dT_ = ", valid(), " ? kt_cT_ - ", mean, " : (", A, ")0;\n"));
      s += warp_total("kt_gq", tree("kt_dT_ * kt_dT_"));
      s += statistics(mean, cat("rsqrt(kt_gq / (", A, ")kt_n + kt_eps)"));
    } else {
      std::string mean = "0";
      if (!k.rms) {
        s += cat("  const ", A, " kt_p0 = ", tree("kt_cT_"), ";\n") + reduce(0, 1);
        mean = cat("(", tot(0), " / (", A, ")kt_n)");
      }
      s +=
          each(cat("  const ", A, " kt_dT_ = ", valid(), " ? kt_cT_ - ", mean, " : (", A, ")0;\n"));
      s += cat("  const ", A, " kt_p1 = ", tree("kt_dT_ * kt_dT_"), ";\n") + reduce(1, 1);
      s += statistics(mean, cat("rsqrt(", tot(1), " / (", A, ")kt_n + kt_eps)"));
    }
    std::string v = "(kt_cT_ - kt_mu) * kt_r";
    if (k.wvec) {  // the parameters in words too, each loaded before its first use
      if (k.has_w) s += param_word_loads("kt_w", "kt_wv");
      if (k.has_b) s += param_word_loads("kt_b", "kt_bv");
    }
    if (k.has_w) v = cat("(", v, ") * ", k.wvec ? "kt_wvT_" : lw("kt_w[kt_iT_]"));
    if (k.has_b) v = cat(v, " + ", k.wvec ? "kt_bvT_" : lw("kt_b[kt_iT_]"));
    return s + stores("kt_y", v) + "}\n";
  }

  // The dx kernel's parameters, the same for both backward forms.
  std::string backward_signature() const {
    std::string s = cat("KILN_KERNEL void kt_ln(", out(X, "kt_dx"), in(X, "kt_dy"), in(X, "kt_x"));
    if (!k.rms) s += in(A, "kt_mean");
    s += in(A, "kt_rstd");
    if (k.has_w) s += in(W, "kt_w");
    if (k.fuse & 1) s += ", " + out(A, "kt_pw");
    if (k.fuse & 2) s += ", " + out(A, "kt_pb");
    return s + ", int64_t kt_n, int64_t kt_rows) {\n";
  }

  std::string backward_cached() const {
    if (k.fuse) return backward_fused();
    return backward_signature() + locals(2) + prologue() + backward_row() + "}\n";
  }
  // One row of the cached backward: dx, with `sums` (text over each slot's kt_u, dy, and kt_h,
  // xhat, 0 off the row) placed before the row's reduction.
  std::string backward_row(const std::string& sums = "") const {
    std::string s = indices() + loads("kt_dy", "kt_u") + loads("kt_x", "kt_v");
    std::string g = "kt_uT_";
    if (k.has_w) g = cat(g, " * ", lw("kt_w[kt_iT_]"));
    s += each(cat("  const ", A, " kt_gT_ = ", valid(), " ? ", g, " : (", A, ")0;\n  const ", A,
                  " kt_hT_ = ", valid(), " ? (kt_vT_", k.rms ? "" : " - kt_mean[kt_rc]",
                  ") * kt_rstd[kt_rc] : (", A, ")0;\n"));
    s += cat("  const ", A, " kt_p0 = ", tree("kt_gT_ * kt_hT_"), ";\n");
    if (!k.rms) s += cat("  const ", A, " kt_p1 = ", tree("kt_gT_"), ";\n");
    s += sums + reduce(0, k.rms ? 1 : 2);
    const std::string inner =
        k.rms ? cat("kt_hT_ * ", tot(0)) : cat("(", tot(1), " + kt_hT_ * ", tot(0), ")");
    return s + stores("kt_dx", cat("kt_rstd[kt_rc] * (kt_gT_ - ", inner, " / (", A, ")kt_n)"));
  }

  // The cached backward with the parameter gradients' partials (k.fuse): group g walks row
  // blocks g, g + G, ... (uniform trip counts: every item meets every barrier), each item
  // adding dy xhat and dy of its slots into its own words of local memory (kt_xw, kt_xb: one
  // word per slot and item, few registers). Then
  // slot 0 adds the group's row slots in order and writes partial row g: x and dy are read once
  // for dx and both gradients, and the sums repeat run to run.
  std::string backward_fused() const {
    const std::uint32_t rows = group / k.lanes;
    const std::string R = num(rows), G = num(group);
    // f for each partial sum kept ("@": w or b) and slot ("#")
    const auto each_sum = [&](const std::string& f) {
      std::string t;
      for (const char* a : {"w", "b"}) {
        if (!(k.fuse & (a[0] == 'w' ? 1 : 2))) continue;
        for (std::uint32_t c = 0; c < k.cap; ++c) {
          std::string e = f;
          for (std::size_t at; (at = e.find('@')) != std::string::npos;) e.replace(at, 1, a);
          for (std::size_t at; (at = e.find('#')) != std::string::npos;) e.replace(at, 1, num(c));
          t += e;
        }
      }
      return t;
    };
    std::string s = backward_signature() + locals(2);
    if (k.fuse & 1) s += cat("  KILN_LOCAL ", A, " kt_xw[", num(group * k.cap), "];\n");
    if (k.fuse & 2) s += cat("  KILN_LOCAL ", A, " kt_xb[", num(group * k.cap), "];\n");
    s += cat("  const uint32_t kt_t = (uint32_t)kiln_local_id(0), kt_slot = kt_t / ", L, "u;\n",
             "  const int64_t kt_lane = (int64_t)(kt_t % ", L, "u);\n");
    s += each_sum("  kt_x@[# * " + G + "u + kt_t] = 0;\n");
    // Row blocks g, g + G, ...: each iteration takes its row's words loaded by the one before
    // and issues the loads of its next row before reducing and storing this one.
    s += cat("  for (int64_t kt_blk = (int64_t)kiln_group_id(0); kt_blk * ", R,
             " < kt_rows; kt_blk += (int64_t)kiln_num_groups(0)) {\n",
             "  kiln_barrier();  // the last row's totals are read: local memory is free\n",
             "  const int64_t kt_row = kt_blk * ", R, " + kt_slot;\n",
             "  const int64_t kt_end = kt_row < kt_rows ? kt_n : 0;\n",
             "  const int64_t kt_rc = kt_row < kt_rows ? kt_row : 0, kt_base = kt_rc * kt_n;\n");
    std::string sums;
    if (k.fuse & 1)
      for (std::uint32_t c = 0; c < k.cap; ++c)
        sums +=
            cat("  kt_xw[", num(c * group), "u + kt_t] += kt_u", num(c), " * kt_h", num(c), ";\n");
    if (k.fuse & 2)
      for (std::uint32_t c = 0; c < k.cap; ++c)
        sums += cat("  kt_xb[", num(c * group), "u + kt_t] += kt_u", num(c), ";\n");
    s += backward_row(sums) + "  }\n  kiln_barrier();\n";
    const auto sum_of = [&](const char* a, std::uint32_t c) {
      std::string e = cat("kt_x", a, "[", num(c * group), "u + kt_it]");
      for (std::uint32_t j = 1; j < rows; ++j)
        e = cat("(", e, " + kt_x", a, "[", num(c * group + j * k.lanes), "u + kt_it])");
      return e;
    };
    // The item's index and lane read again after the loop (not carried across its barriers).
    s += cat("  const uint32_t kt_it = (uint32_t)kiln_local_id(0);\n  if (kt_it < ", L,
             "u) {\n    const int64_t kt_lane = (int64_t)kt_it;\n",
             "    const int64_t kt_p = (int64_t)kiln_group_id(0) * kt_n;\n");
    for (std::uint32_t c = 0; c < k.cap; ++c) {
      s += cat("    if (", slot_index(c), " < kt_n) {\n");
      if (k.fuse & 1) s += cat("      kt_pw[kt_p + ", slot_index(c), "] = ", sum_of("w", c), ";\n");
      if (k.fuse & 2) s += cat("      kt_pb[kt_p + ", slot_index(c), "] = ", sum_of("b", c), ";\n");
      s += "    }\n";
    }
    return s + "  }\n}\n";
  }

  std::string backward() const {
    std::string s = backward_signature();
    if (grouped) s += locals(2);
    s += prologue();
    // Per element: g = dy w and xhat, reading mean and rstd from global memory at each use
    // (cached; no private copy across the barriers).
    const std::string mu = k.rms ? "" : " - kt_mean[kt_rc]";
    std::string g = lx("kt_dy[kt_base + kt_i]");
    if (k.has_w) g = cat(g, " * ", lw("kt_w[kt_i]"));
    const std::string pre =
        cat("        const ", A, " kt_g = ", g, ";\n        const ", A, " kt_xh = (",
            lx("kt_x[kt_base + kt_i]"), mu, ") * kt_rstd[kt_rc];\n");
    if (k.rms) {
      s += fold(0, pre, {"kt_g * kt_xh"}) + reduce(0, 1);
    } else {
      s += fold(0, pre, {"kt_g * kt_xh", "kt_g"}) + reduce(0, 2);
    }
    const std::string inner =
        k.rms ? cat("kt_xh * ", tot(0)) : cat("(", tot(1), " + kt_xh * ", tot(0), ")");
    return s +
           last_loop(cat(
               pre, "    const ", A, " kt_o = kt_rstd[kt_rc] * (kt_g - ", inner, " / (", A,
               ")kt_n);\n    kt_dx[kt_base + kt_i] = ", codegen::store_value(k.x, "kt_o"), ";\n")) +
           "}\n";
  }
};

const char* kind_name(norm_kernel_kind k) {
  switch (k) {
    case norm_kernel_kind::forward: return "forward";
    case norm_kernel_kind::backward: return "backward";
    case norm_kernel_kind::params: return "weight/bias gradients";
    case norm_kernel_kind::params_sum: return "weight/bias gradients' partials summed";
  }
  return "?";
}

}  // namespace

scalar_type norm_acc_type(scalar_type x) {
  return x == scalar_type::f64 ? scalar_type::f64 : scalar_type::f32;
}

std::uint32_t norm_lanes(const device& dev, std::int64_t n) {
  if (!dev.supports(feature::barrier) || n < reduce_policy::group_min_rows) return 1;
  std::uint32_t lanes = reduce_policy::min_lanes;
  while (lanes < group && lanes * 2 * reduce_policy::elems_per_lane <= n) lanes *= 2;
  return lanes;
}

std::uint32_t norm_forward_lanes(const device& dev, scalar_type x, std::int64_t n,
                                 std::int64_t offset) {
  const std::uint32_t lanes = norm_lanes(dev, n);
  const std::uint32_t half = lanes / 2;
  // Only down to one warp: wider rows (128 of 256 lanes at 4096) measured mixed on an H200.
  if (half != 32) return lanes;
  if (norm_vec(x, lanes, n, {offset}) == 8) return norm_cap(half, n, 8) ? half : lanes;
  // f32 (and unaligned 16-bit) rows of 1024 (64 lanes; shorter rows have 32 already) on one
  // warp too where shuffles fold them: H200 f32 [65536, 1024] layer_norm 0.158 -> 0.154 ms,
  // rms_norm 0.165 -> 0.151 ms. Not f64: 32 doubles a lane, not measured.
  const bool four = size_of(norm_acc_type(x)) == 4;
  return four && norm_warp(dev, 32) && norm_cap(half, n) ? half : lanes;
}

std::uint32_t norm_cap(std::uint32_t lanes, std::int64_t n, std::uint32_t vec) {
  if (lanes <= 1) return 0;
  const std::int64_t per = std::int64_t(lanes) * vec;
  const std::int64_t cap = (n + per - 1) / per * vec;
  return cap <= 32 ? std::uint32_t(cap) : 0;  // more would spill registers
}

bool norm_warp(const device& dev, std::uint32_t lanes) {
  // The accumulators are f32 or f64, both moved by the targets' shuffles.
  if (lanes < 32 || lanes % 32 != 0 || !dev.supports(feature::warp32)) return false;
  const codegen::warp_ops* w = codegen::target_for(dev.impl()->api->dialect).warp;
  return w && w->lanes == 32;
}

std::uint32_t norm_vec(scalar_type x, std::uint32_t lanes, std::int64_t n,
                       std::initializer_list<std::int64_t> offsets) {
  if (!is_reduced_float(x) || n % 8 != 0) return 1;
  for (std::int64_t o : offsets)
    if (o % 8 != 0) return 1;
  return lanes > 1 && norm_cap(lanes, n, 8) ? 8 : 1;
}

std::uint32_t norm_fused_lanes(const device& dev, scalar_type x, std::int64_t n,
                               std::initializer_list<std::int64_t> offsets) {
  std::uint32_t lanes = norm_lanes(dev, n);
  // Warp32 devices only: PoCL computed wrong sums from this kernel (a lane index carried
  // across its barriers read back wrong, and later slots' sums taken from earlier ones), so
  // other devices keep the two-kernel form.
  if (lanes < 32 || !norm_warp(dev, 32)) return 0;
  const auto cap = [&](std::uint32_t l) { return norm_cap(l, n, norm_vec(x, l, n, offsets)); };
  // Lanes of at most 8 slots where the group allows, else (f32, 256 lanes) 16: each item keeps
  // two partial sums per slot in local memory (32 KB at most), and on an H200 wider slots lost
  // (f32 [65536, 1024] 0.261 ms with 8 slots, 0.289 with 16; bf16 [16384, 4096] with two
  // words per lane 0.287 ms, against 0.224 for the two-kernel form).
  const std::size_t acc = size_of(norm_acc_type(x));
  while (lanes < group && cap(lanes) > 8) lanes *= 2;
  const auto fits = [&](std::uint32_t l) {
    const std::uint32_t c = cap(l);
    return c && (c <= 8 || (c <= 16 && acc == 4 && norm_vec(x, l, n, offsets) == 1));
  };
  return fits(lanes) ? lanes : 0;
}

std::int64_t norm_fused_groups(const device& dev, std::uint32_t lanes, std::int64_t rows) {
  const std::int64_t per = group / lanes, blocks = (rows + per - 1) / per;
  const std::int64_t units = std::max<std::int64_t>(dev.info().compute_units, 1);
  return std::max<std::int64_t>(1, std::min(blocks, 4 * units));
}

std::string norm_source(const norm_kernel_key& k) {
  const text t{{k}};
  switch (k.kind) {
    case norm_kernel_kind::forward: return k.cap ? t.forward_cached() : t.forward();
    case norm_kernel_kind::backward: return k.cap ? t.backward_cached() : t.backward();
    case norm_kernel_kind::params:
    case norm_kernel_kind::params_sum: return norm_params_source(k);
  }
  return {};
}

void launch_norm(const device& dev, const norm_kernel_key& k, std::vector<arg_binding> args,
                 std::int64_t rows_or_items) {
  if (rows_or_items <= 0) return;
  ir::hasher h;
  h.add("tensor layer_norm v7")
      .add(std::uint64_t(k.kind))
      .add(std::uint64_t(k.x))
      .add(std::uint64_t(k.w))
      .add(std::uint64_t(k.rms) | std::uint64_t(k.has_w) << 1 | std::uint64_t(k.has_b) << 2)
      .add(std::uint64_t(k.lanes))
      .add(std::uint64_t(k.cap))
      .add(std::uint64_t(k.vec) | std::uint64_t(k.warp) << 8 | std::uint64_t(k.wvec) << 9 |
           std::uint64_t(k.fuse) << 10);
  const generated_kernels g = get_generated(dev, "tensor_layer_norm", h.value(), [&] {
    const char* warp_definitions =
        k.warp ? codegen::target_for(dev.impl()->api->dialect).warp->definitions : "";
    return generated_program{
        warp_definitions + norm_source(k),
        {"kt_ln"},
        cat(k.rms ? "rms_norm " : "layer_norm ", kind_name(k.kind), " of ", type_name(k.x), ", ",
            num(k.lanes), " lanes", k.cap ? cat(", ", num(k.cap), " cached") : std::string(),
            k.vec > 1 ? cat(" in words of ", num(k.vec), k.wvec ? " (parameters too)" : "")
                      : std::string(),
            k.warp ? ", warp reductions" : "",
            k.fuse ? ", with the parameter gradients' partials" : "")};
  });
  if (g.compiled) stats_now().programs_compiled++;
  queue& q = dev.default_queue();
  const auto n = static_cast<std::uint64_t>(rows_or_items);
  const local_size ls_group(group);
  if (k.fuse) {
    launch(*g.kernels.at(0).impl(), *q.impl(), range(n * group), &ls_group, args.data(),
           args.size());
  } else if (k.kind == norm_kernel_kind::params_sum && k.lanes > 1) {  // 32 columns a group
    launch(*g.kernels.at(0).impl(), *q.impl(), range((n + 31) / 32 * group), &ls_group, args.data(),
           args.size());
  } else if (k.kind != norm_kernel_kind::params && k.lanes > 1) {
    const std::uint64_t per_group = group / k.lanes;
    launch(*g.kernels.at(0).impl(), *q.impl(), range((n + per_group - 1) / per_group * group),
           &ls_group, args.data(), args.size());
  } else {
    launch(*g.kernels.at(0).impl(), *q.impl(), range(n), nullptr, args.data(), args.size());
  }
  stats_now().kernel_launches++;
}

}  // namespace kiln::detail
