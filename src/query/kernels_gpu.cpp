// GPU kernel templates (work-groups with barriers and local memory, shaped by the target's tile
// policy): map and single-pass reduce here; scan and order-preserving compaction by decoupled
// look-back in kernels_lookback.cpp.
#include "query/kernels_gpu.hpp"

#include <algorithm>
#include <string>

namespace kiln::detail::q {

std::string out_arrays(const segment& seg, const char* n) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += std::string(c_type(seg.out_types[k])) + " o" + std::to_string(k) + "[" + n + "]; ";
  return s;
}
std::string out_refs(const segment& seg, const char* idx) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += ", &o" + std::to_string(k) + "[" + idx + "]";
  return s;
}
namespace {

// The tile shape, from the policy the launcher reads too (run.cpp).
std::string constants(const codegen::tile_policy& p, std::uint32_t items) {
  return "#define KQ_B " + std::to_string(p.group) + "\n#define KQ_IT " + std::to_string(items) +
         "\n#define KQ_MAP_IT " + std::to_string(p.map_items) +
         "\n#define KQ_TILE (KQ_B * KQ_IT)\n#define KQ_RED_IT " + std::to_string(p.reduce_items) +
         "\n#define KQ_LBW " + std::to_string(std::max<std::uint32_t>(p.lookback_window / 32, 1)) +
         "\n#define KQ_SPIN_NS0 " + std::to_string(std::min(p.spin_ns, 32u)) +
         "\n#define KQ_SPIN_NS " + std::to_string(p.spin_ns) +
         "\n#ifndef kiln__backoff\n#define kiln__backoff(ns)\n#endif\n"
         // Polls `var = load` until `ready`, backing off exponentially (look-back status words).
         "#define KQ_POLL(var, load, ready) \\\n"
         "  for (uint32_t kq_ns = KQ_SPIN_NS0;; kq_ns = kq_ns < KQ_SPIN_NS ? 2 * kq_ns : kq_ns) { "
         "\\\n"
         "    var = (load); if (ready) break; kiln__backoff(kq_ns); }\n";
}

std::string map_kernel(const segment& seg, const common_code& p) {
  return "KILN_KERNEL void kq_map(" + p.lead + out_params(seg) +
         "uint64_t kq_n) {\n"
         "  const uint64_t kq_base = kiln_group_id(0) * (KQ_B * KQ_MAP_IT) + kiln_local_id(0);\n"
         "  " +
         out_arrays(seg, "KQ_MAP_IT") +
         "\n"
         "  if (kq_base + (KQ_MAP_IT - 1) * KQ_B < kq_n) {  // full tile: loads issued together\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < KQ_MAP_IT; ++k) kq_elem(kq_base + k * KQ_B" +
         p.call_args + out_refs(seg, "k") +
         ");\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < KQ_MAP_IT; ++k) { const uint64_t i = kq_base + k * KQ_B; " +
         out_stores(seg, "i", "k") +
         "}\n"
         "  } else {\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < KQ_MAP_IT; ++k) {\n"
         "      const uint64_t i = kq_base + k * KQ_B;\n"
         "      if (i < kq_n) { kq_elem(i" +
         p.call_args + out_refs(seg, "k") + "); " + out_stores(seg, "i", "k") +
         "}\n"
         "    }\n"
         "  }\n}\n";
}

// Block-wide tree reduction of kq_acc in local memory; leaves the result in kq_sh[0].
constexpr const char* block_reduce =
    "  kq_sh[kq_t] = kq_a;\n  kiln_barrier();\n"
    "  for (uint32_t s = KQ_B / 2; s > 0; s >>= 1) {\n"
    "    if (kq_t < s) kq_sh[kq_t] = kq_acc_op(kq_sh[kq_t], kq_sh[kq_t + s]);\n"
    "    kiln_barrier();\n  }\n";

std::string reduce_kernel(const reduce_spec& r, const common_code& c, const common_code& p) {
  const bool has_value = !c.out_refs.empty();
  const std::string lift = has_value ? "kq_lift(o0, i)" : "kq_lift(i)";
  const std::string refs = has_value ? ", &o0" : "";
  std::string fin;
  if (r.kind == reduce_kind::custom)
    fin = "      kq_r.v = kq_r.n ? kq_rop(" + codegen::capture_name(r.init) +
          ", kq_r.v) : " + codegen::capture_name(r.init) + "; kq_r.n = 1;\n";
  // Deterministic: the grid depends only on n and the device; every block folds a fixed set
  // of elements in a fixed order; the last block to finish folds the partials in order.
  return "KILN_FUNC kq_acc kq_acc_load(KILN_GLOBAL volatile kq_acc* p) {\n"
         "  kq_acc a; a.v = p->v; a.n = p->n; a.i = p->i; return a;\n}\n"
         "KILN_KERNEL void kq_reduce(" +
         p.lead +
         "KILN_GLOBAL uint64_t* kq_partw, KILN_GLOBAL uint32_t* kq_ticket, "
         "KILN_GLOBAL uint64_t* kq_resw, uint64_t kq_n) {\n"
         "  KILN_LOCAL kq_acc kq_sh[KQ_B];\n  KILN_LOCAL uint32_t kq_last;\n"
         "  KILN_GLOBAL kq_acc* kq_part = (KILN_GLOBAL kq_acc*)kq_partw;\n"
         "  const uint32_t kq_t = (uint32_t)kiln_local_id(0);\n"
         "  const uint64_t kq_g = kiln_group_id(0), kq_ng = kiln_num_groups(0);\n"
         "  const uint64_t kq_stride = kq_ng * KQ_B;\n"
         "  kq_acc kq_a = kq_acc_id();\n"
         "  uint64_t i = kq_g * KQ_B + kq_t;\n"
         "  for (; i + (KQ_RED_IT - 1) * kq_stride < kq_n; i += KQ_RED_IT * kq_stride) {\n"
         "    " +
         c.out_decls +
         "\n"
         "    bool kq_k[KQ_RED_IT];\n" +
         (has_value ? "    " + c.out_decls.substr(0, c.out_decls.find(' ')) + " kq_v[KQ_RED_IT];\n"
                    : std::string()) +
         "#pragma unroll\n"
         "    for (int k = 0; k < KQ_RED_IT; ++k) { kq_k[k] = kq_elem(i + k * kq_stride" +
         p.call_args + refs + ");" + (has_value ? " kq_v[k] = o0;" : "") +
         " }\n"
         "#pragma unroll\n"
         "    for (int k = 0; k < KQ_RED_IT; ++k) if (kq_k[k]) kq_a = kq_acc_op(kq_a, " +
         (has_value ? "kq_lift(kq_v[k], i + k * kq_stride)" : "kq_lift(i + k * kq_stride)") +
         ");\n"
         "  }\n"
         "  for (; i < kq_n; i += kq_stride) {\n"
         "    " +
         c.out_decls +
         "\n"
         "    if (kq_elem(i" +
         p.call_args + refs + ")) kq_a = kq_acc_op(kq_a, " + lift +
         ");\n"
         "  }\n" +
         block_reduce +
         "  if (kq_t == 0) {\n"
         "    KILN_GLOBAL volatile kq_acc* kq_dst = kq_part + kq_g;\n"
         "    kq_dst->v = kq_sh[0].v; kq_dst->n = kq_sh[0].n; kq_dst->i = kq_sh[0].i;\n"
         "    kiln_mem_fence();  // the partial is visible before the ticket is taken\n"
         "    kq_last = kiln_atomic_add(kq_ticket, 1u) == (uint32_t)(kq_ng - 1);\n"
         "  }\n"
         "  kiln_barrier();\n"
         "  if (kq_last) {  // uniform across the block\n"
         "    kiln_mem_fence();\n"
         "    kq_a = kq_acc_id();\n"
         "    for (uint64_t j = kq_t; j < kq_ng; j += KQ_B) kq_a = kq_acc_op(kq_a, "
         "kq_acc_load(kq_part + j));\n" +
         block_reduce +
         "    if (kq_t == 0) {\n"
         "      kq_acc kq_r = kq_sh[0];\n" +
         fin +
         "      KILN_GLOBAL kq_acc* kq_res = (KILN_GLOBAL kq_acc*)kq_resw;\n"
         "      *kq_res = kq_r;\n"
         "      *kq_ticket = 0;  // ready for the next query\n"
         "    }\n"
         "  }\n}\n";
}

}  // namespace

generated render_gpu(const codegen_in& in, const codegen::target& t) {
  const common_code c = render_common(in);
  const common_code& p = c;
  const segment& seg = in.seg;
  generated g;
  g.source = constants(t.tiles, lookback_items(seg, t.tiles)) + c.text;
  if (seg.end == segment_end::reduce) {
    g.source += reduce_kernel(*in.reduce, c, p);
    g.kernels = {"kq_reduce"};
  } else if (seg.end == segment_end::scan) {
    g.source += scan_kernel(seg, p, t, in.warp32);
    g.kernels = {"kq_scan"};
  } else if (seg.has_filter()) {
    g.source += compact_kernel(seg, p, t, in.warp32);
    g.kernels = {"kq_compact"};
  } else {
    g.source += map_kernel(seg, p);
    g.kernels = {"kq_map"};
  }
  return g;
}

}  // namespace kiln::detail::q
