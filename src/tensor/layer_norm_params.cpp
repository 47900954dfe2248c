// Kernel texts for the parameter gradients of layer_norm and rms_norm (norm_kernel_kind::params
// and params_sum; see layer_norm_kernels.hpp): partial column sums of dy xhat and dy over
// chunks of rows, and the partials' columns summed into dweight and dbias.
#include "tensor/layer_norm_text.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

struct params_text : norm_text_base {
  // The partial-sum kernels' parameters: partials out, dy (and x, mean, rstd for dweight) in.
  std::string partials_signature() const {
    std::string s = "KILN_KERNEL void kt_ln(";
    std::string sep;
    if (k.has_w) s += out(A, "kt_pw"), sep = ", ";
    if (k.has_b) s += sep + out(A, "kt_pb");
    s += in(X, "kt_dy");
    if (k.has_w) {
      s += in(X, "kt_x");
      if (!k.rms) s += in(A, "kt_mean");
      s += in(A, "kt_rstd");
    }
    return s + ", int64_t kt_n, int64_t kt_rows, int64_t kt_chunk) {\n";
  }

  // Item p sums rows [p chunk, (p + 1) chunk) into partial row p (partials [P, n]), row by
  // row: the CPU form.
  std::string params_by_rows() const {
    std::string s = partials_signature();
    s += cat("  const int64_t kt_p = (int64_t)kiln_global_id(0), kt_r0 = kt_p * kt_chunk;\n",
             "  const int64_t kt_r1 = kt_r0 + kt_chunk < kt_rows ? kt_r0 + kt_chunk : kt_rows;\n",
             "  for (int64_t kt_j = 0; kt_j < kt_n; ++kt_j) {\n");
    if (k.has_w) s += "    kt_pw[kt_p * kt_n + kt_j] = 0;\n";
    if (k.has_b) s += "    kt_pb[kt_p * kt_n + kt_j] = 0;\n";
    s += "  }\n  for (int64_t kt_r = kt_r0; kt_r < kt_r1; ++kt_r) {\n";
    if (k.has_w)
      s += cat("    const ", A, " kt_m = ", k.rms ? "0" : "kt_mean[kt_r]",
               ", kt_s = kt_rstd[kt_r];\n");
    s += "    for (int64_t kt_j = 0; kt_j < kt_n; ++kt_j) {\n";
    s += cat("      const ", A, " kt_g = ", lx("kt_dy[kt_r * kt_n + kt_j]"), ";\n");
    if (k.has_b) s += "      kt_pb[kt_p * kt_n + kt_j] += kt_g;\n";
    if (k.has_w)
      s += cat("      kt_pw[kt_p * kt_n + kt_j] += kt_g * (", lx("kt_x[kt_r * kt_n + kt_j]"),
               " - kt_m) * kt_s;\n");
    return s + "    }\n  }\n}\n";
  }

  // Column j of the partials [P, n] summed into the gradients (stored in the parameters' type):
  // one launch for both, where two tensor sums and casts cost ~30 us of host time per backward.
  // lanes 1: item j walks the column. Else (devices with barriers) a group of 256 takes 32
  // columns, its 8 warps rows w, w + 8, ... of each, added in warp order through local memory:
  // 528 partial rows walked by one item took ~50 us on an H200. Fixed orders: runs repeat.
  std::string params_sum() const {
    std::string s = "KILN_KERNEL void kt_ln(";
    std::string sep;
    if (k.has_w) s += out(W, "kt_dw"), sep = ", ";
    if (k.has_b) s += sep + out(W, "kt_db");
    if (k.has_w) s += in(A, "kt_pw");
    if (k.has_b) s += in(A, "kt_pb");
    s += ", int64_t kt_n, int64_t kt_parts) {\n";
    const bool split = k.lanes > 1;
    if (split) {
      if (k.has_w) s += cat("  KILN_LOCAL ", A, " kt_shw[256];\n");
      if (k.has_b) s += cat("  KILN_LOCAL ", A, " kt_shb[256];\n");
      s += "  const uint32_t kt_t = (uint32_t)kiln_local_id(0);\n"
           "  const int64_t kt_j = (int64_t)kiln_group_id(0) * 32 + (kt_t & 31u);\n"
           "  const int64_t kt_p0 = (int64_t)(kt_t >> 5), kt_dp = 8;\n";
    } else {
      s += "  const int64_t kt_j = (int64_t)kiln_global_id(0), kt_p0 = 0, kt_dp = 1;\n";
    }
    s += cat(
        "  ", A, " kt_sw = 0, kt_sb = 0;\n",
        "  if (kt_j < kt_n)\n    for (int64_t kt_p = kt_p0; kt_p < kt_parts; kt_p += kt_dp) {\n");
    if (k.has_w) s += "      kt_sw += kt_pw[kt_p * kt_n + kt_j];\n";
    if (k.has_b) s += "      kt_sb += kt_pb[kt_p * kt_n + kt_j];\n";
    s += "    }\n";
    if (split) {
      if (k.has_w) s += "  kt_shw[kt_t] = kt_sw;\n";
      if (k.has_b) s += "  kt_shb[kt_t] = kt_sb;\n";
      s += "  kiln_barrier();\n  if (kt_t >= 32u || kt_j >= kt_n) return;\n";
      s += "  for (uint32_t kt_q = 1; kt_q < 8u; ++kt_q) {\n";
      if (k.has_w) s += "    kt_sw += kt_shw[kt_q * 32u + kt_t];\n";
      if (k.has_b) s += "    kt_sb += kt_shb[kt_q * 32u + kt_t];\n";
      s += "  }\n";
    } else {
      s += "  if (kt_j >= kt_n) return;\n";
    }
    if (k.has_w) s += cat("  kt_dw[kt_j] = ", codegen::store_value(k.w, "kt_sw"), ";\n");
    if (k.has_b) s += cat("  kt_db[kt_j] = ", codegen::store_value(k.w, "kt_sb"), ";\n");
    return s + "}\n";
  }

  // Item i = p n + j sums column j over rows [p chunk, (p + 1) chunk): partials [P, n].
  std::string params() const {
    if (k.lanes == 1) return params_by_rows();
    std::string s = partials_signature();
    s +=
        cat("  const int64_t kt_it = (int64_t)kiln_global_id(0);\n",
            "  const int64_t kt_j = kt_it % kt_n, kt_r0 = kt_it / kt_n * kt_chunk;\n",
            "  const int64_t kt_r1 = kt_r0 + kt_chunk < kt_rows ? kt_r0 + kt_chunk : kt_rows;\n  ",
            A, " kt_sw = 0, kt_sb = 0;\n", "  for (int64_t kt_r = kt_r0; kt_r < kt_r1; ++kt_r) {\n",
            "    const ", A, " kt_g = ", lx("kt_dy[kt_r * kt_n + kt_j]"), ";\n");
    if (k.has_b) s += "    kt_sb += kt_g;\n";
    if (k.has_w)
      s += cat("    kt_sw += kt_g * (", lx("kt_x[kt_r * kt_n + kt_j]"),
               k.rms ? "" : " - kt_mean[kt_r]", ") * kt_rstd[kt_r];\n");
    s += "  }\n";
    if (k.has_w) s += "  kt_pw[kt_it] = kt_sw;\n";
    if (k.has_b) s += "  kt_pb[kt_it] = kt_sb;\n";
    return s + "}\n";
  }
};

}  // namespace

std::string norm_params_source(const norm_kernel_key& k) {
  const params_text t{{k}};
  return k.kind == norm_kernel_kind::params_sum ? t.params_sum() : t.params();
}

}  // namespace kiln::detail
