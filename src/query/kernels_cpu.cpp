// CPU kernel templates. The CPU backend has no barriers: a map is one work-item per element
// (the backend's loop vectorises it); reduce, scan and compaction give each work-item one
// contiguous chunk and finish in a second kernel of the same program. Chunking depends only
// on n and the device, so float results are the same on every run.
#include <string>

#include "query/codegen.hpp"

namespace kiln::detail::q {
namespace {

constexpr const char* chunk_bounds =
    "  const uint64_t kq_c = kiln_global_id(0);\n"
    "  const uint64_t kq_lo = kq_c * kq_cs;\n"
    "  const uint64_t kq_hi = kq_lo + kq_cs < kq_n ? kq_lo + kq_cs : kq_n;\n";

}  // namespace

generated render_cpu(const codegen_in& in) {
  const common_code c = render_common(in);
  const std::string& P = c.lead;
  const std::string& AS = c.call_args;
  const std::string refs = c.out_refs.empty() ? "" : ", " + c.out_refs;
  const segment& seg = in.seg;
  generated g;
  g.source = c.text;
  std::string& s = g.source;
  if (seg.end == segment_end::reduce) {
    const bool has_value = !c.out_refs.empty();
    std::string fin;
    if (in.reduce->kind == reduce_kind::custom)
      fin = "  kq_a.v = kq_a.n ? kq_rop(" + codegen::capture_name(in.reduce->init) +
            ", kq_a.v) : " + codegen::capture_name(in.reduce->init) + "; kq_a.n = 1;\n";
    // One element into accumulator acc (named registers: an indexed array would live in memory).
    s += "#define KQ_STEP(acc, idx) { " + c.out_decls + "if (kq_elem((idx)" + AS + refs +
         ")) acc = kq_acc_op(acc, " + (has_value ? "kq_lift(o0, (idx))" : "kq_lift((idx))") +
         "); }\n";
    s += "KILN_KERNEL void kq_reduce_part(" + P +
         "KILN_GLOBAL uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  // Blocks of 1024 with 4 interleaved accumulators: float sums stay accurate and the\n"
         "  // order (hence the bits) depends only on n and the device.\n"
         "  kq_acc kq_a = kq_acc_id();\n"
         "  for (uint64_t b = kq_lo; b < kq_hi; b += 1024) {\n"
         "    const uint64_t e = b + 1024 < kq_hi ? b + 1024 : kq_hi;\n"
         "    kq_acc l0 = kq_acc_id(), l1 = kq_acc_id(), l2 = kq_acc_id(), l3 = kq_acc_id();\n"
         "    uint64_t i = b;\n"
         "    for (; i + 3 < e; i += 4) {\n"
         "      KQ_STEP(l0, i) KQ_STEP(l1, i + 1) KQ_STEP(l2, i + 2) KQ_STEP(l3, i + 3)\n"
         "    }\n"
         "    for (; i < e; ++i) KQ_STEP(l0, i)\n"
         "    kq_a = kq_acc_op(kq_a, kq_acc_op(kq_acc_op(l0, l1), kq_acc_op(l2, l3)));\n"
         "  }\n"
         "  ((KILN_GLOBAL kq_acc*)kq_partw)[kq_c] = kq_a;\n}\n"
         "KILN_KERNEL void kq_reduce_fin(" +
         P +
         "KILN_GLOBAL uint64_t* kq_partw, KILN_GLOBAL uint64_t* kq_resw, uint64_t kq_chunks) {\n"
         "  kq_acc kq_a = kq_acc_id();\n"
         "  for (uint64_t j = 0; j < kq_chunks; ++j)\n"
         "    kq_a = kq_acc_op(kq_a, ((KILN_GLOBAL kq_acc*)kq_partw)[j]);\n" +
         fin + "  *(KILN_GLOBAL kq_acc*)kq_resw = kq_a;\n}\n";
    g.kernels = {"kq_reduce_part", "kq_reduce_fin"};
  } else if (seg.end == segment_end::scan) {
    const stage& sc = seg.stages[seg.scan_index()];
    const std::string A = c_type(sc.type);
    std::string value;
    if (sc.exclusive)
      value = "      const kq_lb_t kq_q = kq_lb_op(kq_p, kq_r);\n      const " + A +
              " kq_v = kq_q.h ? kq_sop(" + codegen::capture_name(sc.init) +
              ", kq_q.v) : " + codegen::capture_name(sc.init) +
              ";\n      kq_r = kq_lb_op(kq_r, kq_x);\n";
    else
      value = "      kq_r = kq_lb_op(kq_r, kq_x);\n      const " + A +
              " kq_v = kq_lb_op(kq_p, kq_r).v;\n";
    s += "KILN_KERNEL void kq_scan_part(" + P +
         "KILN_GLOBAL uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  kq_lb_t kq_a = kq_lb_id();\n"
         "  for (uint64_t b = kq_lo; b < kq_hi; b += 1024) {  // the same blocks as kq_scan_write\n"
         "    const uint64_t e = b + 1024 < kq_hi ? b + 1024 : kq_hi;\n"
         "    kq_lb_t kq_r = kq_lb_id();\n"
         "    for (uint64_t i = b; i < e; ++i) kq_r = kq_lb_op(kq_r, kq_slift(kq_pre(i" +
         AS +
         ")));\n"
         "    kq_a = kq_lb_op(kq_a, kq_r);\n"
         "  }\n"
         "  ((KILN_GLOBAL kq_lb_t*)kq_partw)[kq_c] = kq_a;\n}\n"
         "KILN_KERNEL void kq_scan_write(" +
         P + out_params(seg) +
         "KILN_GLOBAL const uint64_t* kq_partw, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  kq_lb_t kq_p = kq_lb_id();\n"
         "  for (uint64_t j = 0; j < kq_c; ++j) kq_p = kq_lb_op(kq_p, "
         "((KILN_GLOBAL const kq_lb_t*)kq_partw)[j]);\n"
         "  // Running value within blocks of 1024, added to the blocks' prefix: one pass, and\n"
         "  // float rounding grows with the block, not the chunk.\n"
         "  for (uint64_t b = kq_lo; b < kq_hi; b += 1024) {\n"
         "    const uint64_t e = b + 1024 < kq_hi ? b + 1024 : kq_hi;\n"
         "    kq_lb_t kq_r = kq_lb_id();\n"
         "    for (uint64_t i = b; i < e; ++i) {\n"
         "      const kq_lb_t kq_x = kq_slift(kq_pre(i" +
         AS + "));\n" + value + "      " + c.out_decls + "\n      kq_post(i" + AS + ", kq_v" +
         refs + ");\n      " + out_stores(seg, "i", nullptr) +
         "\n    }\n    kq_p = kq_lb_op(kq_p, kq_r);\n  }\n}\n";
    g.kernels = {"kq_scan_part", "kq_scan_write"};
  } else if (seg.has_filter()) {
    // Blocks of the write pass: element values and flags into arrays (a loop that
    // vectorises), then a scalar pass that only moves survivors.
    // Values are zeroed first: a dropped element's may be left unset (a dead store when not).
    std::string block_decls, block_zero, block_refs;
    for (std::size_t k = 0; k < seg.out_types.size(); ++k) {
      const std::string o = cat("o", std::to_string(k));
      block_decls += cat(c_type(seg.out_types[k]), " ", o, "[256]; ");
      block_zero += cat(o, "[i - b] = 0; ");
      block_refs += cat(", &", o, "[i - b]");
    }
    const std::string stores_j = out_stores(seg, "kq_o", "j");
    s += "KILN_KERNEL void kq_count_part(" + P +
         "KILN_GLOBAL uint64_t* kq_part, uint64_t kq_n, uint64_t kq_cs) {\n" + chunk_bounds +
         "  uint64_t kq_k = 0;\n"
         "  for (uint64_t i = kq_lo; i < kq_hi; ++i) {\n    " +
         c.out_decls + "\n    kq_k += kq_elem(i" + AS + refs +
         ") ? 1 : 0;\n  }\n"
         "  kq_part[kq_c] = kq_k;\n}\n"
         "KILN_KERNEL void kq_compact_write(" +
         P + out_params(seg) +
         "KILN_GLOBAL const uint64_t* kq_part, KILN_GLOBAL uint64_t* kq_count, uint64_t kq_n, "
         "uint64_t kq_cs, uint64_t kq_chunks) {\n" +
         chunk_bounds +
         "  uint64_t kq_o = 0;\n"
         "  for (uint64_t j = 0; j < kq_c; ++j) kq_o += kq_part[j];\n"
         "  const uint64_t kq_e = kq_o + kq_part[kq_c];\n"
         "  for (uint64_t b = kq_lo; b < kq_hi; b += 256) {\n"
         "    const uint64_t m = b + 256 < kq_hi ? 256 : kq_hi - b;\n    ";
    s += block_decls;
    s += "unsigned char kq_k[256];\n    for (uint64_t i = b; i < b + m; ++i) { ";
    s += block_zero;
    s += "kq_k[i - b] = kq_elem(i";
    s += AS + block_refs;
    s += ") ? 1 : 0; }\n"
         "    // Branch-free: every element is stored at the next free slot, which only a\n"
         "    // survivor advances. The slot past this chunk's last survivor is the next chunk's\n"
         "    // (or past the output): only a block that may reach it checks the bound.\n"
         "    if (kq_o + m <= kq_e) {\n      for (uint64_t j = 0; j < m; ++j) { ";
    s += stores_j;
    s += "kq_o += kq_k[j]; }\n    } else {\n      for (uint64_t j = 0; j < m; ++j) {\n"
         "        if (kq_o < kq_e) { ";
    s += stores_j;
    s += "}\n        kq_o += kq_k[j];\n      }\n    }\n  }\n"
         "  if (kq_c == kq_chunks - 1) *kq_count = kq_o;\n}\n";
    g.kernels = {"kq_count_part", "kq_compact_write"};
  } else {
    s += "KILN_KERNEL void kq_map(" + P + out_params(seg) +
         "uint64_t kq_n) {\n"
         "  const uint64_t i = kiln_global_id(0);\n  " +
         c.out_decls + "\n  kq_elem(i" + AS + refs + ");\n  " + out_stores(seg, "i", nullptr) +
         "\n}\n";
    g.kernels = {"kq_map"};
  }
  return g;
}

}  // namespace kiln::detail::q
