// CPU kernel templates. The CPU backend has no barriers: a map is one work-item per element
// (the backend's loop vectorises it); reduce, scan and compaction give each work-item one
// contiguous chunk and finish in a second kernel of the same program. Chunking depends only
// on n and the device, so float results are the same on every run.
#include <string>

#include "query/codegen.hpp"

namespace kiln::detail::q {
namespace {

std::string out_params(const segment& seg) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += "KILN_GLOBAL " + std::string(c_type(seg.out_types[k])) + "* KILN_RESTRICT kq_out" +
         std::to_string(k) + ", ";
  return s;
}
std::string out_stores(const segment& seg, const char* pos) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += "kq_out" + std::to_string(k) + "[" + pos + "] = o" + std::to_string(k) + "; ";
  return s;
}

constexpr const char* chunk_bounds =
    "  const uint64_t kq_c = kiln_global_id(0);\n"
    "  const uint64_t kq_lo = kq_c * kq_cs;\n"
    "  const uint64_t kq_hi = kq_lo + kq_cs < kq_n ? kq_lo + kq_cs : kq_n;\n";

}  // namespace

generated render_cpu(const codegen_in& in) {
  const common_code c = render_common(in);
  const std::string P = c.params.empty() ? "" : c.params + ", ";
  const std::string AS = c.args.empty() ? "" : ", " + c.args;
  const std::string refs = c.out_refs.empty() ? "" : ", " + c.out_refs;
  const segment& seg = in.seg;
  generated g;
  g.source = c.text;
  std::string& s = g.source;
  if (seg.end == segment_end::reduce) {
    const bool has_value = !c.out_refs.empty();
    std::string fin;
    if (in.reduce->kind == reduce_kind::custom)
      fin = "  kq_a.v = kq_a.n ? kq_rop(" + in.reduce->init + ", kq_a.v) : " + in.reduce->init +
            "; kq_a.n = 1;\n";
    s += "KILN_KERNEL void kq_reduce_part(" + P +
         "KILN_GLOBAL uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  kq_acc kq_a = kq_acc_id();\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) {\n    " + c.out_decls +
         "\n    if (kq_elem(i" + AS + refs + ")) kq_a = kq_acc_op(kq_a, " +
         (has_value ? "kq_lift(o0, i)" : "kq_lift(i)") +
         ");\n  }\n"
         "  ((KILN_GLOBAL kq_acc*)kq_partw)[kq_c] = kq_a;\n}\n"
         "KILN_KERNEL void kq_reduce_fin(" + P +
         "KILN_GLOBAL uint64_t* kq_partw, KILN_GLOBAL uint64_t* kq_resw, uint64_t kq_chunks) {\n"
         "  kq_acc kq_a = kq_acc_id();\n"
         "  for (uint64_t j = 0; j < kq_chunks; ++j)\n"
         "    kq_a = kq_acc_op(kq_a, ((KILN_GLOBAL kq_acc*)kq_partw)[j]);\n" + fin +
         "  *(KILN_GLOBAL kq_acc*)kq_resw = kq_a;\n}\n";
    g.kernels = {"kq_reduce_part", "kq_reduce_fin"};
  } else if (seg.end == segment_end::scan) {
    const stage& sc = seg.stages[seg.scan_index()];
    const std::string A = c_type(sc.type);
    std::string value;
    if (sc.exclusive)
      value = "    const " + A + " kq_v = kq_p.h ? kq_sop(" + sc.init + ", kq_p.v) : " + sc.init +
              ";\n    kq_p = kq_lb_op(kq_p, kq_x);\n";
    else
      value = "    kq_p = kq_lb_op(kq_p, kq_x);\n    const " + A + " kq_v = kq_p.v;\n";
    s += "KILN_KERNEL void kq_scan_part(" + P +
         "KILN_GLOBAL uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  kq_lb_t kq_a = kq_lb_id();\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) kq_a = kq_lb_op(kq_a, kq_slift(kq_pre(i" +
         AS +
         ")));\n"
         "  ((KILN_GLOBAL kq_lb_t*)kq_partw)[kq_c] = kq_a;\n}\n"
         "KILN_KERNEL void kq_scan_write(" + P + out_params(seg) +
         "KILN_GLOBAL const uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" +
         chunk_bounds +
         "  kq_lb_t kq_p = kq_lb_id();\n"
         "  for (uint64_t j = 0; j < kq_c; ++j) kq_p = kq_lb_op(kq_p, "
         "((KILN_GLOBAL const kq_lb_t*)kq_partw)[j]);\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) {\n"
         "    const kq_lb_t kq_x = kq_slift(kq_pre(i" + AS + "));\n" + value + "    " +
         c.out_decls + "\n    kq_post(i" + AS + ", kq_v" + refs + ");\n    " +
         out_stores(seg, "i") + "\n  }\n}\n";
    g.kernels = {"kq_scan_part", "kq_scan_write"};
  } else if (seg.has_filter()) {
    s += "KILN_KERNEL void kq_count_part(" + P +
         "KILN_GLOBAL uint64_t* kq_part, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  uint64_t kq_k = 0;\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) {\n    " + c.out_decls +
         "\n    kq_k += kq_elem(i" + AS + refs + ") ? 1 : 0;\n  }\n"
         "  kq_part[kq_c] = kq_k;\n}\n"
         "KILN_KERNEL void kq_compact_write(" + P + out_params(seg) +
         "KILN_GLOBAL const uint64_t* kq_part, KILN_GLOBAL uint64_t* kq_count, uint64_t kq_n, "
         "uint64_t kq_cs, uint64_t kq_chunks) {\n" + chunk_bounds +
         "  uint64_t kq_o = 0;\n"
         "  for (uint64_t j = 0; j < kq_c; ++j) kq_o += kq_part[j];\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) {\n    " + c.out_decls +
         "\n    if (kq_elem(i" + AS + refs + ")) { " + out_stores(seg, "kq_o") +
         "++kq_o; }\n  }\n"
         "  if (kq_c == kq_chunks - 1) *kq_count = kq_o;\n}\n";
    g.kernels = {"kq_count_part", "kq_compact_write"};
  } else {
    s += "KILN_KERNEL void kq_map(" + P + out_params(seg) +
         "uint64_t kq_n) {\n"
         "  const uint64_t i = kiln_global_id(0);\n  " + c.out_decls +
         "\n  kq_elem(i" + AS + refs + ");\n  " + out_stores(seg, "i") + "\n}\n";
    g.kernels = {"kq_map"};
  }
  return g;
}

}  // namespace kiln::detail::q
