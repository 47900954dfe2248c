#include "tensor/index_code.hpp"

#include "codegen/text.hpp"
#include "ir/layout.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

ir::stride_class cls(const ir::graph& g, std::size_t k, std::size_t d) {
  const ir::layout& L = g.inputs[k].l;
  return ir::classify(L.dims[d], L.strides[d]);
}

}  // namespace

std::string stride_params(const ir::graph& g, std::size_t rank) {
  std::string s;
  for (std::size_t k = 0; k < g.inputs.size(); ++k)
    for (std::size_t d = 0; d < rank; ++d)
      if (cls(g, k, d) == ir::stride_class::general)
        s += cat(", int64_t kt_s", num(k), "_", num(d));
  return s;
}

std::string input_offset(const ir::graph& g, std::size_t k, std::size_t d0, std::size_t d1,
                         const char* prefix) {
  std::string s;
  for (std::size_t d = d0; d < d1; ++d) {
    const std::string coord = cat(prefix, num(d - d0));
    const ir::stride_class c = cls(g, k, d);
    if (c == ir::stride_class::zero) continue;
    s += cat(s.empty() ? "" : " + ", coord);
    if (c == ir::stride_class::general) s += cat(" * kt_s", num(k), "_", num(d));
  }
  return s;
}

std::string output_position(const ir::graph& g, std::size_t kept) {
  std::string s;
  if (kept > 0) {
    s += "  int64_t kt_o = kt_oi;\n";
    for (std::size_t d = kept; d-- > 1;)
      s += cat("  const int64_t kt_x", num(d), " = kt_o % kt_k", num(d), "; kt_o /= kt_k", num(d),
               ";\n");
    s += "  const int64_t kt_x0 = kt_o;\n";
  }
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const std::string at = input_offset(g, k, 0, kept, "kt_x");
    s += cat("  const int64_t kt_b", num(k), " = ", at.empty() ? "0" : at, ";\n");
  }
  return s;
}

std::string row_coords(std::size_t reduced) {
  if (reduced == 1) return "    const int64_t kt_y0 = kt_r;\n";
  if (reduced == 0) return {};
  std::string s = "    int64_t kt_q = kt_r;\n";
  for (std::size_t j = reduced; j-- > 1;)
    s += cat("    const int64_t kt_y", num(j), " = kt_q % kt_m", num(j), "; kt_q /= kt_m", num(j),
             ";\n");
  return s + "    const int64_t kt_y0 = kt_q;\n";
}

}  // namespace kiln::detail
