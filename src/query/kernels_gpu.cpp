// GPU kernel templates (work-groups of 256 with barriers and local memory): map, single-pass
// reduce, and single-pass scan / order-preserving compaction by decoupled look-back.
//
// Look-back (as CUB's single-pass scan, Merrill & Garland 2016): tile t publishes its own
// aggregate early (flag 1), then walks back over its predecessors 32 at a time, combining
// aggregates until it meets an inclusive prefix (flag 2), and publishes its own inclusive
// prefix. Memory ordering: a value is stored, then kiln_mem_fence() (__threadfence: device
// scope), then the status word with a volatile store; readers load the status word with a
// volatile load, fence, then load the value through a volatile pointer (bypassing L1). Status
// words carry an epoch (status = epoch << 2 | flag) so the arrays never need clearing between
// queries; tiles are taken in blockIdx order, which the hardware dispatches in increasing
// order, so every predecessor a tile waits for is already running.
#include <string>

#include "query/codegen.hpp"

namespace kiln::detail::q {
namespace {

// The tile shape, from the policy the launcher reads too (run.cpp).
std::string constants(const codegen::tile_policy& p, std::uint32_t items) {
  return "#define KQ_B " + std::to_string(p.group) + "\n#define KQ_IT " + std::to_string(items) +
         "\n#define KQ_MAP_IT " + std::to_string(p.map_items) +
         "\n#define KQ_TILE (KQ_B * KQ_IT)\n#define KQ_RED_IT " + std::to_string(p.reduce_items) +
         "\n";
}

// "T0 o0[N]; T1 o1[N];"
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

// The look-back part shared by scan and compaction. Inputs: kq_run (the thread's fold),
// kq_tile, kq_t. Outputs: kq_excl (thread exclusive within the tile), kq_total (tile
// aggregate), kq_prefix (local: everything before the tile). Each step has a warp form (targets
// with 32-lane warp primitives) and a portable form (local memory and barriers only).
constexpr const char* block_scan_warp = R"(
  // Warp scans by shuffles, then the warps' totals through local memory: two barriers.
  const uint32_t kq_lane = kq_t & 31u, kq_warp = kq_t >> 5;
  kq_lb_t kq_win = kq_run;
  for (uint32_t d = 1; d < 32; d <<= 1) {
    const kq_lb_t o = kq_lb_shfl_up(kq_win, d);
    if (kq_lane >= d) kq_win = kq_lb_op(o, kq_win);
  }
  kq_lb_t kq_wex = kq_lb_shfl_up(kq_win, 1);
  if (kq_lane == 0) kq_wex = kq_lb_id();
  if (kq_lane == 31) kq_sh[kq_warp] = kq_win;
  kiln_barrier();
  kq_lb_t kq_wp = kq_lb_id(), kq_total = kq_lb_id();
  for (uint32_t w = 0; w < KQ_B / 32; ++w) {
    if (w == kq_warp) kq_wp = kq_total;
    kq_total = kq_lb_op(kq_total, kq_sh[w]);
  }
  const kq_lb_t kq_excl = kq_lb_op(kq_wp, kq_wex);
)";
constexpr const char* block_scan_local = R"(
  kq_sh[kq_t] = kq_run;
  kiln_barrier();
  for (uint32_t off = 1; off < KQ_B; off <<= 1) {
    const kq_lb_t other = kq_t >= off ? kq_sh[kq_t - off] : kq_lb_id();
    kiln_barrier();
    if (kq_t >= off) kq_sh[kq_t] = kq_lb_op(other, kq_sh[kq_t]);
    kiln_barrier();
  }
  const kq_lb_t kq_excl = kq_t ? kq_sh[kq_t - 1] : kq_lb_id();
  const kq_lb_t kq_total = kq_sh[KQ_B - 1];
)";

// Inputs: kq_total (the tile's aggregate). Output: kq_prefix (local: all tiles before).
constexpr const char* lookback_publish = R"(
  if (kq_t == 0) {  // publish early: successors may use the aggregate before our prefix
    if (kq_tile == 0) kq_prefix = kq_lb_id();
    kq_lb_put(kq_status, kq_aggw, kq_inclw, kq_tile, kq_tile == 0 ? 2u : 1u, kq_total, kq_epoch);
    kq_done = kq_tile == 0;
  }
)";
constexpr const char* lookback_warp = R"(
  // Warp 0 walks back 32 tiles per step: ballot finds the nearest inclusive prefix, a
  // shuffle tree folds the window in sequence order (older tiles first).
  if (kq_tile != 0 && kq_t < 32) {
    const uint32_t kq_lane = kq_t;
    kq_lb_t kq_back = kq_lb_id();
    int64_t kq_pos = (int64_t)kq_tile - 1;
    for (;;) {
      const int64_t t = kq_pos - (int64_t)kq_lane;
      uint32_t f = 2u;
      kq_lb_t v = kq_lb_id();
      if (t >= 0) v = kq_lb_get(kq_status, kq_aggw, kq_inclw, t, kq_epoch, &f);
      const uint32_t pm = kiln__warp_ballot(f == 2u);
      const uint32_t stop = pm ? kiln__warp_ffs(pm) - 1u : 31u;
      if (kq_lane > stop) v = kq_lb_id();
      for (uint32_t d = 1; d < 32; d <<= 1) {
        const kq_lb_t o = kq_lb_shfl_down(v, d);
        if (kq_lane + d < 32) v = kq_lb_op(o, v);
      }
      if (kq_lane == 0) kq_back = kq_lb_op(v, kq_back);
      if (pm) break;
      kq_pos -= 32;
    }
    if (kq_lane == 0) {
      kq_prefix = kq_back;
      kq_lb_put(kq_status, kq_aggw, kq_inclw, kq_tile, 2u, kq_lb_op(kq_back, kq_total), kq_epoch);
    }
  }
  kiln_barrier();
)";
constexpr const char* lookback_local = R"(
  kq_lb_t kq_back = kq_lb_id();  // thread 0: combined aggregates of the tiles walked so far
  int64_t kq_pos = (int64_t)kq_tile - 1;
  kiln_barrier();
  while (!kq_done) {
    if (kq_t < 32) {
      const int64_t t = kq_pos - (int64_t)kq_t;
      uint32_t f = 2u;
      kq_lb_t v = kq_lb_id();
      if (t >= 0) v = kq_lb_get(kq_status, kq_aggw, kq_inclw, t, kq_epoch, &f);
      kq_lbf[kq_t] = f;
      kq_lbv[kq_t] = v;
    }
    kiln_barrier();
    if (kq_t == 0) {
      kq_lb_t w = kq_lb_id();
      uint32_t found = 0;
      for (int j = 0; j < 32; ++j) {  // lane j holds tile kq_pos - j: fold right to left
        w = kq_lb_op(kq_lbv[j], w);
        if (kq_lbf[j] == 2u) { found = 1; break; }
      }
      kq_back = kq_lb_op(w, kq_back);
      if (found) {
        kq_prefix = kq_back;
        kq_lb_put(kq_status, kq_aggw, kq_inclw, kq_tile, 2u, kq_lb_op(kq_back, kq_total), kq_epoch);
      }
      kq_done = found;
    }
    kq_pos -= 32;  // every lane's next window
    kiln_barrier();
  }
)";

// Shuffles a look-back value up or down the warp; field by field, as shuffles move registers.
constexpr const char* lb_shuffle = R"(
KILN_FUNC kq_lb_t kq_lb_shfl_up(kq_lb_t x, unsigned d) {
  kq_lb_t r; r.v = kiln__warp_shfl_up(x.v, d); r.h = kiln__warp_shfl_up(x.h, d); return r;
}
KILN_FUNC kq_lb_t kq_lb_shfl_down(kq_lb_t x, unsigned d) {
  kq_lb_t r; r.v = kiln__warp_shfl_down(x.v, d); r.h = kiln__warp_shfl_down(x.h, d); return r;
}
)";

// The block scan and look-back in the target's best form, and the helpers they need.
struct lookback_code {
  std::string helpers, scan;
};
lookback_code lookback_for(const codegen::target& t) {
  if (t.warp && t.warp->lanes == 32)
    return {std::string(t.warp->definitions) + lb_shuffle,
            std::string(block_scan_warp) + lookback_publish + lookback_warp};
  return {"", std::string(block_scan_local) + lookback_publish + lookback_local};
}

// Publishing and reading tile states. General form: the value, a device-wide fence, then the
// status word (epoch << 2 | flag); a reader spins on the status word, fences, then reads the
// value through a volatile pointer.
constexpr const char* lb_fenced = R"(
KILN_FUNC void kq_lb_put(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                         KILN_GLOBAL uint64_t* inclw, uint64_t t, uint32_t flag, kq_lb_t v,
                         uint32_t epoch) {
  KILN_GLOBAL kq_lb_t* vals = (KILN_GLOBAL kq_lb_t*)(flag == 2u ? inclw : aggw);
  vals[t] = v;
  kiln_mem_fence();
  *(KILN_GLOBAL volatile uint32_t*)(st + t) = (epoch << 2) | flag;
}
KILN_FUNC kq_lb_t kq_lb_get(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                            KILN_GLOBAL uint64_t* inclw, int64_t t, uint32_t epoch,
                            uint32_t* flag) {
  uint32_t s;
  do { s = *(KILN_GLOBAL volatile uint32_t*)(st + t); } while ((s >> 2) != epoch || (s & 3u) == 0u);
  kiln_mem_fence();
  *flag = s & 3u;
  KILN_GLOBAL kq_lb_t* vals = (KILN_GLOBAL kq_lb_t*)(*flag == 2u ? inclw : aggw);
  return kq_lb_load((KILN_GLOBAL volatile kq_lb_t*)(vals + t));
}
)";

// Counts: flag (2 bits), epoch (14) and value (48) in one 64-bit word, stored and loaded
// whole: no fence, one load per predecessor.
constexpr const char* lb_packed = R"(
KILN_FUNC void kq_lb_put(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                         KILN_GLOBAL uint64_t* inclw, uint64_t t, uint32_t flag, kq_lb_t v,
                         uint32_t epoch) {
  *(KILN_GLOBAL volatile uint64_t*)(inclw + t) =
      ((uint64_t)flag << 62) | ((uint64_t)epoch << 48) | (v.v & 0xFFFFFFFFFFFFull);
}
KILN_FUNC kq_lb_t kq_lb_get(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                            KILN_GLOBAL uint64_t* inclw, int64_t t, uint32_t epoch,
                            uint32_t* flag) {
  uint64_t w;
  do { w = *(KILN_GLOBAL volatile uint64_t*)(inclw + t); }
  while (((w >> 48) & 0x3FFFu) != epoch || (w >> 62) == 0u);
  *flag = (uint32_t)(w >> 62);
  kq_lb_t r; r.v = w & 0xFFFFFFFFFFFFull; r.h = 1; return r;
}
)";

constexpr const char* lookback_locals =
    "  KILN_LOCAL kq_lb_t kq_sh[KQ_B];\n  KILN_LOCAL kq_lb_t kq_lbv[32];\n"
    "  KILN_LOCAL uint32_t kq_lbf[32];\n  KILN_LOCAL kq_lb_t kq_prefix;\n"
    "  KILN_LOCAL uint32_t kq_done;\n"
    "  const uint64_t kq_tile = kiln_group_id(0);\n"
    "  const uint32_t kq_t = (uint32_t)kiln_local_id(0);\n"
    "  const uint64_t kq_first = kq_tile * KQ_TILE + (uint64_t)kq_t * KQ_IT;\n";

constexpr const char* lookback_params =
    "KILN_GLOBAL uint32_t* kq_status, KILN_GLOBAL uint64_t* kq_aggw, "
    "KILN_GLOBAL uint64_t* kq_inclw, uint32_t kq_epoch, ";

// Outputs are staged in local memory so that a tile's results leave in coalesced stores
// (CUB's approach); done when a tile's outputs fit in 32 KiB.
std::uint32_t tile_items(const segment& seg, const codegen::tile_policy& p) {
  return seg.end == segment_end::scan ? p.scan_items : p.compact_items;
}
bool staged(const segment& seg, const codegen::tile_policy& p) {
  std::size_t bytes = 0;
  for (scalar_type t : seg.out_types) bytes += size_of(t);
  return bytes * p.group * tile_items(seg, p) <= p.stage_bytes;
}
std::string stage_arrays(const segment& seg) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += "  KILN_LOCAL " + std::string(c_type(seg.out_types[k])) + " kq_s" + std::to_string(k) +
         "[KQ_TILE];\n";
  return s;
}
// kq_s<c>[pos] = o<c>[idx] for every component.
std::string to_stage(const segment& seg, const char* pos, const char* idx) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s += "kq_s" + std::to_string(k) + "[" + pos + "] = o" + std::to_string(k) + "[" + idx + "]; ";
  return s;
}
std::string from_stage(const segment& seg, const char* pos, const char* j) {
  std::string s;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    s +=
        "kq_out" + std::to_string(k) + "[" + pos + "] = kq_s" + std::to_string(k) + "[" + j + "]; ";
  return s;
}

std::string compact_kernel(const segment& seg, const common_code& p, const codegen::target& t) {
  const bool st = staged(seg, t.tiles);
  const lookback_code lb = lookback_for(t);
  std::string tail;
  if (st)
    tail =
        "  uint32_t kq_lp = (uint32_t)kq_excl.v;\n"
        "#pragma unroll\n"
        "  for (int k = 0; k < KQ_IT; ++k)\n"
        "    if ((kq_keep >> k) & 1u) { " +
        to_stage(seg, "kq_lp", "k") +
        "++kq_lp; }\n"
        "  kiln_barrier();\n"
        "  const uint32_t kq_tc = (uint32_t)kq_total.v;\n"
        "  const uint64_t kq_ob = kq_prefix.v;\n"
        "  for (uint32_t j = kq_t; j < kq_tc; j += KQ_B) { " +
        from_stage(seg, "kq_ob + j", "j") +
        "}\n"
        "  if (kq_tile == kiln_num_groups(0) - 1 && kq_t == 0) *kq_count = kq_ob + kq_tc;\n";
  else
    tail =
        "  uint64_t kq_o = kq_prefix.v + kq_excl.v;\n"
        "#pragma unroll\n"
        "  for (int k = 0; k < KQ_IT; ++k)\n"
        "    if ((kq_keep >> k) & 1u) { " +
        out_stores(seg, "kq_o", "k") +
        "++kq_o; }\n"
        "  if (kq_tile == kiln_num_groups(0) - 1 && kq_t == KQ_B - 1) *kq_count = kq_o;\n";
  // Counts are scanned as has-value pairs like any scan value; h is always set.
  return std::string(
             "typedef struct { uint64_t v; uint32_t h; } kq_lb_t;\n"
             "KILN_FUNC kq_lb_t kq_lb_id() { kq_lb_t r; r.v = 0; r.h = 1; return r; }\n"
             "KILN_FUNC kq_lb_t kq_lb_op(kq_lb_t a, kq_lb_t b) { a.v += b.v; return a; }\n"
             "KILN_FUNC kq_lb_t kq_lb_load(KILN_GLOBAL volatile kq_lb_t* p) {\n"
             "  kq_lb_t r; r.v = p->v; r.h = 1; return r;\n}\n") +
         lb.helpers + lb_packed + "KILN_KERNEL void kq_compact(" + p.lead + out_params(seg) +
         lookback_params + "KILN_GLOBAL uint64_t* kq_count, uint64_t kq_n) {\n" + lookback_locals +
         (st ? stage_arrays(seg) : std::string()) + "  " + out_arrays(seg, "KQ_IT") + "\n" +

         "  uint32_t kq_keep = 0;\n  kq_lb_t kq_run = kq_lb_id();\n"
         "#pragma unroll\n"
         "  for (int k = 0; k < KQ_IT; ++k) {\n"
         "    const uint64_t i = kq_first + k;\n"
         "    if (i < kq_n && kq_elem(i" +
         p.call_args + out_refs(seg, "k") +
         ")) { kq_keep |= 1u << k; kq_run.v += 1; }\n"
         "  }\n" +
         lb.scan + tail + "}\n";
}

// Scan values of 4 bytes: flag and epoch in the high half of one 64-bit word, the value in
// the low half. Published values always hold an element (h = 1).
std::string lb_packed32(const std::string& A) {
  return "typedef union { " + A + " v; uint32_t u; } kq_pun;\n" + R"(
KILN_FUNC void kq_lb_put(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                         KILN_GLOBAL uint64_t* inclw, uint64_t t, uint32_t flag, kq_lb_t v,
                         uint32_t epoch) {
  kq_pun p; p.u = 0; p.v = v.v;
  *(KILN_GLOBAL volatile uint64_t*)(inclw + 2 * t) =
      ((uint64_t)((epoch << 2) | flag) << 32) | (uint64_t)p.u;
}
KILN_FUNC kq_lb_t kq_lb_get(KILN_GLOBAL uint32_t* st, KILN_GLOBAL uint64_t* aggw,
                            KILN_GLOBAL uint64_t* inclw, int64_t t, uint32_t epoch,
                            uint32_t* flag) {
  uint64_t w;
  do { w = *(KILN_GLOBAL volatile uint64_t*)(inclw + 2 * t); }
  while ((uint32_t)(w >> 34) != epoch || ((w >> 32) & 3u) == 0u);
  *flag = (uint32_t)(w >> 32) & 3u;
  kq_pun p; p.u = (uint32_t)w;
  kq_lb_t r; r.v = p.v; r.h = 1; return r;
}
)";
}

std::string scan_kernel(const segment& seg, const common_code& p, const codegen::target& t) {
  const stage& sc = seg.stages[seg.scan_index()];
  const std::string A = c_type(sc.type);
  const bool st = staged(seg, t.tiles);
  const lookback_code lb = lookback_for(t);
  std::string value;
  if (sc.exclusive)
    value = "      const " + A + " kq_v = kq_p.h ? kq_sop(" + codegen::capture_name(sc.init) +
            ", kq_p.v) : " + codegen::capture_name(sc.init) +
            ";\n      kq_p = kq_lb_op(kq_p, kq_x[k]);\n";
  else
    value = "      kq_p = kq_lb_op(kq_p, kq_x[k]);\n      const " + A + " kq_v = kq_p.v;\n";
  std::string decls;
  for (std::size_t k = 0; k < seg.out_types.size(); ++k)
    decls += std::string(c_type(seg.out_types[k])) + " o" + std::to_string(k) + "[1]; ";
  std::string tail =
      st ? "      " + to_stage(seg, "kq_t * KQ_IT + k", "0") +
               "\n    }\n  }\n"
               "  kiln_barrier();\n"
               "  const uint64_t kq_tb = kq_tile * KQ_TILE;\n"
               "  const uint64_t kq_tn = kq_n - kq_tb < KQ_TILE ? kq_n - kq_tb : KQ_TILE;\n"
               "  for (uint32_t j = kq_t; j < kq_tn; j += KQ_B) { " +
               from_stage(seg, "kq_tb + j", "j") + "}\n}\n"
         : "      " + out_stores(seg, "i", "0") + "\n    }\n  }\n}\n";
  // 8-byte values use the fenced protocol. (A 16-byte packed word, as CUB uses, lost
  // prefixes in testing on the H100; left out until understood.)
  const std::string protocol = size_of(sc.type) <= 4 ? lb_packed32(A) : std::string(lb_fenced);
  return lb.helpers + protocol + "KILN_KERNEL void kq_scan(" + p.lead + out_params(seg) +
         lookback_params + "uint64_t kq_n) {\n" + lookback_locals +
         (st ? stage_arrays(seg) : std::string()) +
         "  kq_lb_t kq_x[KQ_IT];\n  kq_lb_t kq_run = kq_lb_id();\n"
         "#pragma unroll\n"
         "  for (int k = 0; k < KQ_IT; ++k) {\n"
         "    const uint64_t i = kq_first + k;\n"
         "    kq_x[k] = i < kq_n ? kq_slift(kq_pre(i" +
         p.call_args +
         ")) : kq_lb_id();\n"
         "    kq_run = kq_lb_op(kq_run, kq_x[k]);\n"
         "  }\n" +
         lb.scan +
         "  kq_lb_t kq_p = kq_lb_op(kq_prefix, kq_excl);\n"
         "#pragma unroll\n"
         "  for (int k = 0; k < KQ_IT; ++k) {\n"
         "    const uint64_t i = kq_first + k;\n"
         "    if (i < kq_n) {\n" +
         value + "      " + decls + "\n      kq_post(i" + p.call_args + ", kq_v" +
         out_refs(seg, "0") + ");\n" + tail;
}

}  // namespace

generated render_gpu(const codegen_in& in, const codegen::target& t) {
  const common_code c = render_common(in);
  const common_code& p = c;
  const segment& seg = in.seg;
  generated g;
  g.source = constants(t.tiles, tile_items(seg, t.tiles)) + c.text;
  if (seg.end == segment_end::reduce) {
    g.source += reduce_kernel(*in.reduce, c, p);
    g.kernels = {"kq_reduce"};
  } else if (seg.end == segment_end::scan) {
    g.source += scan_kernel(seg, p, t);
    g.kernels = {"kq_scan"};
  } else if (seg.has_filter()) {
    g.source += compact_kernel(seg, p, t);
    g.kernels = {"kq_compact"};
  } else {
    g.source += map_kernel(seg, p);
    g.kernels = {"kq_map"};
  }
  return g;
}

}  // namespace kiln::detail::q
