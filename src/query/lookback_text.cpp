// The decoupled look-back protocol's text, shared by the scan and compaction templates
// (kernels_lookback.cpp); lookback_text.hpp says what each piece expects and defines.
#include "query/lookback_text.hpp"

namespace kiln::detail::q::lookback {

// Block scans. Inputs: kq_run (the thread's fold), kq_t; the warp form also kq_lane and kq_warp.
// Outputs: kq_excl (the thread's exclusive prefix within the tile), kq_total (the tile's
// aggregate).
const char* const block_scan_warp = R"(
  // Warp scans by shuffles, then the warps' totals through local memory: two barriers.
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
const char* const block_scan_local = R"(
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
const char* const publish = R"(
  if (kq_t == 0) {  // publish early: successors may use the aggregate before our prefix
    if (kq_tile == 0) kq_prefix = kq_lb_id();
    kq_lb_put(kq_status, kq_aggw, kq_inclw, kq_tile, kq_tile == 0 ? 2u : 1u, kq_total, kq_epoch);
    kq_done = kq_tile == 0;
  }
)";
const char* const walk_warp = R"(
  // Warp 0 walks back KQ_LBW windows of 32 tiles per step, their status words loaded together:
  // inclusive prefixes can spread no faster than one step's reach per round trip to L2, so
  // the reach (KQ_LBW * 32 tiles) bounds the kernel's rate. Per window, nearest first: ballot
  // finds the nearest inclusive prefix, a shuffle tree folds the window in sequence order
  // (older tiles first).
  if (kq_tile != 0 && kq_t < 32) {
    const uint32_t kq_lane = kq_t;
    kq_lb_t kq_back = kq_lb_id();
    int64_t kq_pos = (int64_t)kq_tile - 1;
    for (uint32_t kq_found = 0; !kq_found; kq_pos -= 32 * KQ_LBW) {
      kq_lb_t kq_wv[KQ_LBW];
      uint32_t kq_wf[KQ_LBW];
#pragma unroll
      for (int w = 0; w < KQ_LBW; ++w) {
        const int64_t t = kq_pos - 32 * w - (int64_t)kq_lane;
        kq_wf[w] = 2u;
        kq_wv[w] = kq_lb_id();
        if (t >= 0) kq_wv[w] = kq_lb_get(kq_status, kq_aggw, kq_inclw, t, kq_epoch, &kq_wf[w]);
      }
#pragma unroll
      for (int w = 0; w < KQ_LBW; ++w) {
        if (kq_found) break;  // uniform across the warp
        const uint32_t pm = kiln__warp_ballot(kq_wf[w] == 2u);
        const uint32_t stop = pm ? kiln__warp_ffs(pm) - 1u : 31u;
        kq_lb_t v = kq_lane > stop ? kq_lb_id() : kq_wv[w];
        for (uint32_t d = 1; d < 32; d <<= 1) {
          const kq_lb_t o = kq_lb_shfl_down(v, d);
          if (kq_lane + d < 32) v = kq_lb_op(o, v);
        }
        if (kq_lane == 0) kq_back = kq_lb_op(v, kq_back);
        kq_found = pm != 0u;
      }
    }
    if (kq_lane == 0) {
      kq_prefix = kq_back;
      kq_lb_put(kq_status, kq_aggw, kq_inclw, kq_tile, 2u, kq_lb_op(kq_back, kq_total), kq_epoch);
    }
  }
  kiln_barrier();
)";
const char* const walk_local = R"(
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
const char* const shuffle = R"(
KILN_FUNC kq_lb_t kq_lb_shfl_up(kq_lb_t x, unsigned d) {
  kq_lb_t r; r.v = kiln__warp_shfl_up(x.v, d); r.h = kiln__warp_shfl_up(x.h, d); return r;
}
KILN_FUNC kq_lb_t kq_lb_shfl_down(kq_lb_t x, unsigned d) {
  kq_lb_t r; r.v = kiln__warp_shfl_down(x.v, d); r.h = kiln__warp_shfl_down(x.h, d); return r;
}
)";

// Publishing and reading tile states. General form: the value, a device-wide fence, then the
// status word (epoch << 2 | flag); a reader spins on the status word, fences, then reads the
// value through a volatile pointer.
const char* const fenced = R"(
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
  KQ_POLL(s, *(KILN_GLOBAL volatile uint32_t*)(st + t), (s >> 2) == epoch && (s & 3u) != 0u);
  kiln_mem_fence();
  *flag = s & 3u;
  KILN_GLOBAL kq_lb_t* vals = (KILN_GLOBAL kq_lb_t*)(*flag == 2u ? inclw : aggw);
  return kq_lb_load((KILN_GLOBAL volatile kq_lb_t*)(vals + t));
}
)";

// Counts: flag (2 bits), epoch (14) and value (48) in one 64-bit word, stored and loaded
// whole: no fence, one load per predecessor.
const char* const packed_count = R"(
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
  KQ_POLL(w, *(KILN_GLOBAL volatile uint64_t*)(inclw + t),
          ((w >> 48) & 0x3FFFu) == epoch && (w >> 62) != 0u);
  *flag = (uint32_t)(w >> 62);
  kq_lb_t r; r.v = w & 0xFFFFFFFFFFFFull; r.h = 1; return r;
}
)";

// Scan values of 4 bytes: flag and epoch in the high half of one 64-bit word, the value in
// the low half. Published values always hold an element (h = 1).
std::string packed32(const std::string& A) {
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
  KQ_POLL(w, *(KILN_GLOBAL volatile uint64_t*)(inclw + 2 * t),
          (uint32_t)(w >> 34) == epoch && ((w >> 32) & 3u) != 0u);
  *flag = (uint32_t)(w >> 32) & 3u;
  kq_pun p; p.u = (uint32_t)w;
  kq_lb_t r; r.v = p.v; r.h = 1; return r;
}
)";
}

const char* const params =
    "KILN_GLOBAL uint32_t* kq_status, KILN_GLOBAL uint64_t* kq_aggw, "
    "KILN_GLOBAL uint64_t* kq_inclw, uint32_t kq_epoch, ";

}  // namespace kiln::detail::q::lookback
